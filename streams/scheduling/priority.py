"""Deciding before running: while the scheduler works through a burst of due slots, the
executor of the same process waits.

Why: in a top-of-minute spike both share one event loop (and one GIL). Running the slots
already fired while tens of thousands more are due this second only delays the fires behind
them, and every fired record is already the durable decision; its run waits behind the rest of
the spike either way. So the punctuator holds the gate for the length of a burst (bounded: a
burst lasts only while due slots are still on time, ``ScheduleState.fire_due``) and the
executor takes up the fired records right after.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

# a burst's runs start no sooner than this after the burst did: on a box whose workers share
# cores, the other workers' bursts of the same second get them first (docs/performance.md,
# "Spike"); half a second since the executor's runs became cheap enough that a small tenant's
# slot in the burst waits mostly for this (issue 39's victim, p99 <= 2 s)
RUNS_HELD_S = 0.5


class Gate:
    def __init__(self, held_s: float = RUNS_HELD_S, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        """``clock`` and ``sleep`` are the monotonic clock and how to wait on it: tests pass a
        fake pair and read what was waited, where timing a real wait would depend on the box."""
        self._open = asyncio.Event()
        self._open.set()
        self._held_s = held_s
        self._clock, self._sleep = clock, sleep
        self._reopens_at = 0.0  # clock() before which passed() still waits

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    @contextmanager
    def held(self) -> Iterator[None]:
        """Closed for the body of the ``with`` and at least ``held_s`` from its start, open again
        however it ends."""
        self._reopens_at = self._clock() + self._held_s
        self._open.clear()
        try:
            yield
        finally:
            self._open.set()

    async def passed(self) -> None:
        """Return at once while open; otherwise once the holder lets go and ``held_s`` from the
        hold's start has passed."""
        if not self._open.is_set():
            await self._open.wait()
        wait = self._reopens_at - self._clock()
        if wait > 0:
            await self._sleep(wait)


@contextmanager
def collections_deferred() -> Iterator[None]:
    """No automatic garbage collection for the body of the ``with`` (a burst), as it was after.

    Why: a burst allocates a handful of objects per slot, so at the worker's thresholds
    (``streams.worker.GC_THRESHOLDS``) a 50,000-slot burst ran some twenty young collections, about
    10 ms each with a million jobs indexed, inside the very second its slots were due. What they
    would have found is collected at the next threshold after the burst, when the executor's turn
    comes anyway; a burst is short (only slots still on time), so the heap grows little."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
