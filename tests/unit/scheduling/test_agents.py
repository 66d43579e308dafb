"""``streams.scheduling.agents``: what the punctuators do around the state's deciding."""

import gc

import pytest

from streams.scheduling.agents import collections_deferred


@pytest.mark.parametrize("enabled", [True, False])
def test_collections_are_deferred_for_the_burst_and_left_as_they_were(enabled):
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        with collections_deferred():
            assert not gc.isenabled()
        assert gc.isenabled() is enabled
        with pytest.raises(RuntimeError), collections_deferred():
            raise RuntimeError("the burst failed")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
