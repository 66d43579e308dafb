import asyncio
import gc
import time

import pytest

from streams.scheduling.priority import Gate, collections_deferred


def test_the_gate_holds_waiters_for_the_burst_and_opens_however_it_ends():
    async def scenario() -> list[str]:
        gate, order = Gate(held_s=0), []

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


def test_runs_wait_held_s_from_the_burst_start_not_only_its_end():
    """The first worker done with its burst must leave the cores to the others' bursts of the
    same second: its runs start ``held_s`` after its burst started, or when the burst ends if
    that is later."""
    async def waited_after(gate: Gate, burst_s: float) -> float:
        started = time.monotonic()
        with gate.held():
            waiting = asyncio.ensure_future(gate.passed())
            await asyncio.sleep(burst_s)
        await waiting
        return time.monotonic() - started

    short = asyncio.run(waited_after(Gate(held_s=0.3), burst_s=0.02))
    assert 0.3 <= short < 1.0
    long = asyncio.run(waited_after(Gate(held_s=0.05), burst_s=0.3))
    assert 0.3 <= long < 0.25 + 0.3  # the burst's end, not its start plus held_s, came last


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
