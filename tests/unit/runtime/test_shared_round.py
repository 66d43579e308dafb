"""Broker questions shared by waiting walkers (streams.runtime.shared_round), without a broker."""

from __future__ import annotations

import asyncio
import threading

from streams.runtime.shared_round import SharedRound
from tests.waiting import loop_turns


def test_waiters_share_a_round_and_never_take_one_begun_before_they_asked():
    release, running = threading.Event(), threading.Event()
    rounds: list[int] = []

    def fetch() -> int:
        rounds.append(len(rounds) + 1)
        running.set()
        release.wait(5)
        return len(rounds)

    async def scenario() -> tuple[list[int], int]:
        shared = SharedRound(fetch)
        early = [asyncio.create_task(shared.fresh()) for _ in range(50)]
        # round 1 is running: a question asked now needs round 2
        assert await asyncio.to_thread(running.wait, 5), "round 1 never started"
        late = asyncio.create_task(shared.fresh())
        await loop_turns()  # every question is asked
        release.set()
        return list(await asyncio.gather(*early)), await late

    early, late = asyncio.run(scenario())
    # the first asker starts round 1; everyone who asked once it had begun (the other 49, a
    # moment later, and the late one) shares round 2: 51 questions, two requests
    assert early == [1] + [2] * 49
    assert late == 2 and rounds == [1, 2]


def test_a_recent_answer_is_reused_and_an_old_one_is_asked_again() -> None:
    calls = []

    def fetch() -> int:
        calls.append(1)
        return len(calls)

    async def run() -> list[int]:
        rounds = SharedRound(fetch)
        first = await rounds.fresh()
        again = await rounds.recent(max_age_s=60)  # the round just done: no new request
        later = await rounds.recent(max_age_s=0)  # too old for this caller: a new round
        return [first, again, later]

    assert asyncio.run(run()) == [1, 1, 2] and len(calls) == 2
