"""The opt-out barrier (``streams.campaigns.barrier``), without a broker."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from streams.campaigns import barrier as barrier_module
from streams.campaigns.barrier import (
    ENDS_MAX_TIMEOUT_S,
    ENDS_MIN_TIMEOUT_S,
    OptOutBarrier,
    next_ends_timeout_s,
)
from streams.runtime.shared_round import SharedRound
from streams.topology import SUPPRESSIONS


def test_a_failed_round_of_the_suppressions_ends_is_asked_again_not_raised():
    """A raised round failed the whole walk, and its chunks past their intents ended
    ``unknown`` (a rolling restart's stale leader epoch)."""
    rounds = []

    def ends() -> dict[tuple[str, int], int]:
        rounds.append(1)
        if len(rounds) == 1:
            raise RuntimeError("Broker: Leader epoch is older than broker epoch")
        return {(SUPPRESSIONS.name, 0): 0}

    with ThreadPoolExecutor(1) as pool:
        barrier = OptOutBarrier("127.0.0.1:1", 1, pool)
        barrier._ends = SharedRound(ends)  # noqa: SLF001
        asyncio.run(asyncio.wait_for(barrier.caught_up(0), 10))
    assert len(rounds) == 2


def test_a_failed_round_doubles_the_timeout_up_to_its_cap() -> None:
    timeouts = [ENDS_MIN_TIMEOUT_S]
    for _ in range(2000):  # an outage of hours: the timeout stays a number, capped
        timeouts.append(next_ends_timeout_s(timeouts[-1], None))
    assert timeouts[:6] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert timeouts[-1] == ENDS_MAX_TIMEOUT_S


def test_an_answered_round_sets_the_timeout_from_how_long_it_took() -> None:
    """A healthy cluster's milliseconds give the floor; a slow but healthy one settles at three
    times its answers (1.5 s: 4.5 s), instead of failing every other round at 1 s."""
    assert next_ends_timeout_s(8.0, 0.004) == ENDS_MIN_TIMEOUT_S
    assert next_ends_timeout_s(1.0, 1.5) == 4.5
    assert next_ends_timeout_s(4.5, 1.5) == 4.5
    assert next_ends_timeout_s(8.0, 7.0) == ENDS_MAX_TIMEOUT_S


def test_rounds_are_given_longer_after_each_failure_and_short_again_after_an_answer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A round stuck on a client that still names a node shutting down is given up after 1 s,
    not 3 s (a rolling restart's 3.2 s without sending); the timeouts grow while rounds fail, so
    a slow cluster is still answered, and start short again once one answers."""
    asked: list[float] = []

    def end_offsets(bootstrap: str, tps: list[tuple[str, int]],
                    timeout_s: float) -> dict[tuple[str, int], int]:
        asked.append(timeout_s)
        if len(asked) in (1, 2, 4):
            raise RuntimeError(f"KafkaError{{code=_TIMED_OUT}} after {timeout_s} s")
        return {tp: 0 for tp in tps}

    monkeypatch.setattr(barrier_module, "end_offsets", end_offsets)
    with ThreadPoolExecutor(1) as pool:
        barrier = OptOutBarrier("127.0.0.1:1", 2, pool)
        asyncio.run(asyncio.wait_for(barrier.caught_up(0), 10))
        asyncio.run(asyncio.wait_for(barrier.caught_up(1), 10))
    assert asked == [1.0, 2.0, 4.0, 1.0, 2.0]
