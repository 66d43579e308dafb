"""One broker question shared by every task waiting on it, answered only by a round that began
after the task asked.

Walkers ask the broker the same thing before each chunk — "who holds this partition?" (the
send fence), "where does the suppressions log end?" (the opt-out barrier) — and each answer is
only good for a chunk if it was read after that chunk's own step before it (the intent's flush,
the chunk's start): an opt-out the API acknowledged earlier is then below the end read. Asked
one by one that is a request per chunk, 280 a second at the fan-out's target rate; shared, a
request per round however many walkers wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SharedRound(Generic[T]):
    def __init__(self, fetch: Callable[[], T]) -> None:
        self.fetch = fetch  # blocking: run on the loop's default executor
        self._round: asyncio.Future[T] | None = None
        self._round_started = -1.0

    async def fresh(self) -> T:
        """The answer of a round that started after this call (joined if one already has)."""
        loop = asyncio.get_running_loop()
        asked = loop.time()
        while True:
            current = self._round
            if current is not None and self._round_started >= asked:
                return await asyncio.shield(current)
            if current is not None and not current.done():
                await asyncio.wait([current])  # a round begun before we asked: wait it out
                continue
            self._round_started = loop.time()
            self._round = loop.run_in_executor(None, self.fetch)
            # its waiters may all have left (the send fence stops waiting once the lease holds)
            self._round.add_done_callback(_retrieved)

    async def recent(self, max_age_s: float) -> T:
        """The answer of a round that started at most ``max_age_s`` ago, else a fresh one. For a
        question asked only to wait out a state (the send fence before a chunk's intent): an
        answer a little old is as good, and costs no round of its own."""
        current = self._round
        loop = asyncio.get_running_loop()
        if (current is not None and current.done() and not current.cancelled()
                and current.exception() is None and loop.time() - self._round_started <= max_age_s):
            return current.result()
        return await self.fresh()


def _retrieved(round_: asyncio.Future[T]) -> None:
    """Mark a round's exception as seen: asyncio logs one never retrieved, and a round whose
    waiters all left is no error of its own."""
    if not round_.cancelled():
        round_.exception()
