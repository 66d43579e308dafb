"""The hand-off between scheduling and execution: everything each side tells the other, in one
place both import.

A fired record crosses the boundary twice in-process, besides the topics (``cronstream.fired``
out, ``cronstream.ledger`` back, ``streams.topology``)::

    scheduling ──▶ cronstream.fired ──▶ execution
        │  the burst gate (Gate): the scheduler holds it while it decides a spike's second,
        │      the executor waits at it before it runs what is already fired
        │◀─ Runs: done marks (was a fire id run, or its email's send begun?), the ids in
        │      flight, where the executor stands on each fired partition (ExecutorQueue):
        │      the reconciler's and a preparation's view of the runs
        └◀─ Decisions.slot_decided: a run's outcome is on the ledger (acknowledged)

Why in-process and not through the ledger: jobs, fired and ledger are co-partitioned by job id,
so the executor that records a slot's outcome is the scheduler's own worker. Neither side
imports the other (``streams.worker``, the composition root, wires them: the executor is a
``Runs``, the scheduler's state a ``Decisions``), and this module imports nothing of either.
Importing it does nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import NamedTuple, Protocol

# a burst's runs start no sooner than this after the burst did: on a box whose workers share
# cores, the other workers' bursts of the same second get them first (docs/performance.md,
# "Spike"); half a second since the executor's runs became cheap enough that a small tenant's
# slot in the burst waits mostly for this (issue 39's victim, p99 <= 2 s)
RUNS_HELD_S = 0.5


class ExecutorQueue(NamedTuple):
    """Where this worker's executor stands on a partition of the fired topic."""

    fired_ms: int  # when the record it last took up was fired (a partition's are in order)
    next_offset: int  # the offset after that record
    end_offset: int | None  # the partition's end, from the broker (None: not known)


class Runs(Protocol):
    """What the executor knows of the slots it runs (``streams.execution.executor.Executor``),
    read by the scheduler: whether to decide a slot again, and what the reconciler may leave."""

    def done_mark(self, partition: int, fid: str) -> bytes | None:
        """The fire id's mark in the done table: its outcome, an email's intent
        (``streams.topology.INTENT``), or None (never run here)."""
        ...

    def in_flight_ids(self) -> set[str]:
        """Fire ids taken up and not yet decided."""
        ...

    def queues(self, ends: dict[int, int]) -> dict[int, ExecutorQueue]:
        """Where the executor stands on each fired partition, given the partitions' ends."""
        ...


class Decisions(Protocol):
    """What the scheduler is told by the executor (``ScheduleState``)."""

    def slot_decided(self, fid: str) -> None:
        """The slot's outcome is on the ledger, acknowledged."""
        ...


class Gate:
    """Deciding before running: while the scheduler works through a burst of due slots, the
    executor of the same process waits.

    Why: in a top-of-minute spike both share one event loop (and one GIL). Running the slots
    already fired while tens of thousands more are due this second only delays the fires behind
    them, and every fired record is already the durable decision; its run waits behind the rest
    of the spike either way. So the deciding punctuator holds the gate for the length of a burst
    (bounded: a burst lasts only while due slots are still on time, ``ScheduleState.fire_due``)
    and the executor takes up the fired records right after."""

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
