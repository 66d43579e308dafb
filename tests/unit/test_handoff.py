"""``streams.handoff``: the burst gate the scheduler holds and the executor waits at."""

import asyncio

import pytest

from streams.handoff import Gate
from tests.fake_clock import FakeClock
from tests.waiting import loop_turns


def test_the_gate_holds_waiters_for_the_burst_and_opens_however_it_ends():
    async def scenario() -> list[str]:
        gate, order = Gate(held_s=0), []

        async def executor() -> None:
            await gate.passed()
            order.append("ran")

        with gate.held():
            waiting = asyncio.ensure_future(executor())
            await loop_turns()  # the executor had every chance to run
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
    async def waited(held_s: float, burst_s: float) -> tuple[float, list[float]]:
        """How long a run asked for at the burst's start waited, and the sleeps it took."""
        clock = FakeClock()
        gate = Gate(held_s=held_s, clock=clock, sleep=clock.async_sleep)
        started = clock()
        with gate.held():
            waiting = asyncio.ensure_future(gate.passed())
            await loop_turns()
            assert not waiting.done(), "a run passed while the burst was decided"
            clock.advance(burst_s)  # the burst
        await waiting
        return clock() - started, clock.slept

    short, slept = asyncio.run(waited(held_s=0.3, burst_s=0.02))
    assert short == pytest.approx(0.3) and slept == [pytest.approx(0.28)]  # held_s from its start
    long, slept = asyncio.run(waited(held_s=0.05, burst_s=0.3))
    assert long == pytest.approx(0.3) and slept == []  # the burst's end, not held_s after it
