import asyncio
import gc

import pytest

from streams.priority import Gate, collections_deferred


def test_the_gate_holds_waiters_for_the_burst_and_opens_however_it_ends():
    async def scenario() -> list[str]:
        gate, order = Gate(), []

        async def executor() -> None:
            await gate.passed()
            order.append("ran")

        with gate.held():
            waiting = asyncio.ensure_future(executor())
            await asyncio.sleep(0.01)
            order.append("decided")
        await waiting
        with pytest.raises(RuntimeError), gate.held():
            raise RuntimeError("a failing round")
        assert gate.is_open
        await asyncio.wait_for(gate.passed(), 1)  # open: no wait
        return order

    assert asyncio.run(scenario()) == ["decided", "ran"]


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
