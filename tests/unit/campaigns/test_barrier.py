"""The opt-out barrier (``streams.campaigns.barrier``), without a broker."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from streams.campaigns.barrier import OptOutBarrier
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
