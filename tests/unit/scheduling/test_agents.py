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


@pytest.mark.parametrize("enabled", [True, False])
def test_a_rebuild_runs_without_collections_and_what_it_built_is_frozen_before_they_resume(
        enabled):
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        frozen = gc.get_freeze_count()
        with collections_deferred(freeze=True):
            assert not gc.isenabled()
            built = [[n] for n in range(1000)]  # tracked containers, as an index's are
        assert gc.get_freeze_count() >= frozen + len(built)
        assert not any(gc.is_tracked(item) and item in gc.get_objects(0) for item in built[:3])
        assert gc.isenabled() is enabled
        with pytest.raises(RuntimeError), collections_deferred(freeze=True):
            raise RuntimeError("the rebuild failed")
        assert gc.isenabled() is enabled
    finally:
        gc.unfreeze()  # the test process's heap collected as before
        (gc.enable if was else gc.disable)()
