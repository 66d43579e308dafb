"""The worker's SES slots: how many campaign SES calls it has out at once, each on a thread of
its own.

Why slots, and why a chunk takes one before its intent: a chunk holds a slot from before its
intent is written until SES answered, so what a crash leaves at ``intent`` is what was on the wire
or about to be, at most ``SES_SLOTS`` chunks a worker (docs/testing.md, the fault judge's bound).
Before, the intents were written and the calls then queued for a thread of a pool the walkers'
consume() calls shared: issue 42's campaign (200k, 30 % throttled, SES at 80 ms, SIGKILL at a
fifth) left 1,500-2,000 addresses ``unknown``, 650-1,100 with the slots.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

SES_SLOTS = 16  # SES calls a worker has out at once (the fault judge reads it: tests/chaos)
T = TypeVar("T")


class SesSlot:
    """A held SES slot: ``release`` runs once both the holder left and its call's thread, if it
    started one, finished (both on the event loop's thread)."""

    def __init__(self, pool: ThreadPoolExecutor, release: Callable[[], None]) -> None:
        self._pool, self._release = pool, release
        self._holders = 1  # the chunk; its call's thread adds one

    def start(self, send: Callable[[], T]) -> asyncio.Future[T]:
        """Run ``send`` on the slot's thread; its answer, to await. Started before the chunk's
        intent, so the request is built while the intent is written (``ses.Departure``)."""
        loop = asyncio.get_running_loop()
        work = self._pool.submit(send)
        self._holders += 1
        work.add_done_callback(lambda _: loop.call_soon_threadsafe(self.leave))
        return asyncio.wrap_future(work)

    def leave(self) -> None:
        self._holders -= 1
        if self._holders == 0:
            self._release()


class SesSlots:
    """The worker's ``size`` slots and the threads their calls run on (created idle: threads
    start at the first call)."""

    def __init__(self, size: int = SES_SLOTS) -> None:
        self._pool = ThreadPoolExecutor(size, thread_name_prefix="campaign-ses")
        self._free = asyncio.Semaphore(size)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[SesSlot]:
        """One of the slots, given back once the chunk has left it and its call's thread has
        finished: a walker cancelled mid-call (a revocation) leaves the thread running, and its
        slot must not go to a chunk whose call would then queue behind it."""
        await self._free.acquire()
        held = SesSlot(self._pool, self._free.release)
        try:
            yield held
        finally:
            held.leave()
