"""Bulk job imports: paced into the jobs topic, so a million jobs never queue ahead of a change.

    API (POST /v1/job-imports) ──▶ cronstream.job-imports ──▶ [import_jobs] ──▶ cronstream.jobs
                                                               (at most ``WINDOW`` not yet applied)

Why a second topic: ``apply_jobs`` applies a partition's job records in order, a few thousand a
second per worker. Written straight to ``cronstream.jobs``, a tenant's million-job import (or
delete) put every other tenant's new job behind it: a campaign tick created during such a backlog
went live 143 s late. Imports wait on their own topic instead, and this worker copies them into
the jobs topic only while fewer than ``WINDOW`` of its copies are still unapplied, so a job
created or changed through ``/v1/jobs`` waits behind at most a window (about a second of
applying), whatever is being imported.

An import record copied after a newer change of its job is dropped (``stale``): the topic order of
the jobs topic, not of the two topics together, is the job's history, and a job created by import
and then changed through the API before the import reached it keeps the change.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from streams.runtime.codec import codec
from streams.runtime.emit import Emitter
from streams.topology import JOB_IMPORTS, JOBS

log = logging.getLogger(__name__)

# import records copied to the jobs topic and not yet applied, per worker: with apply_jobs at
# 2-4k records/s per worker, about a second of applying is ahead of a change made by the API
WINDOW = 2_000
BATCH = 500  # import records copied per produce (one broker acknowledgement awaited per batch)
HELD = 5_000  # import records read and held before reading pauses
# a header on the copies, so apply_jobs can give their room back
IMPORTED = "cronstream-import"


class ImportWindow:
    """How many copies this worker has made that ``apply_jobs`` has not applied yet; the copier
    waits while it is full. Reset on a rebalance: copies of a partition that went to another
    worker are applied there, and would otherwise hold this window for ever."""

    def __init__(self, size: int = WINDOW) -> None:
        self.size = size
        self.unapplied = 0
        self._room: asyncio.Event | None = None

    @property
    def room(self) -> asyncio.Event:  # created in the worker's event loop, not at import
        if self._room is None:
            self._room = asyncio.Event()
            self._room.set()
        return self._room

    def copied(self, count: int) -> None:
        self.unapplied += count
        if self.unapplied >= self.size:
            self.room.clear()

    def applied(self) -> None:
        self.unapplied = max(0, self.unapplied - 1)
        if self.unapplied < self.size:
            self.room.set()

    def reset(self) -> None:
        self.unapplied = 0
        self.room.set()


def stale(current: bytes | None, incoming: bytes | None) -> bool:
    """Whether an import record is older than what the jobs table holds for its job: a put whose
    revision is not above the current one's, or a delete of a job that is not there (nothing to
    delete; a job created later through the API must not be deleted by an older import)."""
    if incoming is None:
        return current is None
    if current is None:
        return False
    revision: int = codec().decode(incoming)["revision"]
    current_revision: int = codec().decode(current)["revision"]
    return revision <= current_revision


def imported(headers: Any) -> bool:
    """Whether a jobs-topic record is an import's copy (its ``IMPORTED`` header)."""
    return bool(headers) and IMPORTED in headers


class Importer:
    """Holds the import records read, and copies them into the jobs topic a batch at a time
    while the window has room, skipping stale ones.

    Why the agent never waits for the window itself: an agent that waits stops every other
    agent of the worker (``Runtime.pauser``), ``apply_jobs`` with them, whose progress would
    open the window: a deadlock, seen on the first try. The agent only holds; the copier waits;
    reading is paused while ``HELD`` records wait, and resumed below half of that."""

    def __init__(self, jobs: Any, emitter: Callable[[], Emitter], window: ImportWindow,
                 pause: Callable[[bool], None] = lambda paused: None) -> None:
        self.jobs = jobs  # the jobs table (co-partitioned with the import topic)
        self._new_emitter, self._emitter = emitter, None
        self.window = window
        self.pause = pause  # pause (True) or resume (False) reading the import topic
        self.held: deque[tuple[Any, Any]] = deque()  # (stream, event) read, not copied yet
        self.paused = False
        self._arrived: asyncio.Event | None = None
        self._copier: asyncio.Task[None] | None = None

    @property
    def emitter(self) -> Emitter:  # made when the first import arrives: registering connects nothing
        if self._emitter is None:
            self._emitter = self._new_emitter()
        return self._emitter

    @property
    def arrived(self) -> asyncio.Event:
        if self._arrived is None:
            self._arrived = asyncio.Event()
        return self._arrived

    def hold(self, stream: Any, event: Any) -> None:
        """An import record read: held for the copier; reading pauses while too many wait."""
        self.held.append((stream, event))
        self.arrived.set()
        if len(self.held) >= HELD and not self.paused:
            self.paused = True
            self.pause(True)

    def start_copier(self) -> None:
        """The copier's task, started by the agent (again if an earlier one ended)."""
        if self._copier is None or self._copier.done():
            if self._copier is not None and not self._copier.cancelled() \
                    and self._copier.exception() is not None:
                log.error("the import copier had stopped; started again",
                          exc_info=self._copier.exception())
            self._copier = asyncio.get_running_loop().create_task(self.copying())

    async def copying(self) -> None:
        while True:
            if not self.held:
                self.arrived.clear()
                await self.arrived.wait()
            await self.window.room.wait()
            batch = [self.held.popleft() for _ in range(min(BATCH, len(self.held)))]
            try:
                await self.copy([event for _, event in batch])
            except Exception:
                first = batch[0][1].message
                log.exception("import batch of %d records (partition %d offset %d first) not "
                              "copied; left unacknowledged for redelivery", len(batch),
                              first.partition, first.offset)
            else:
                for stream, event in batch:
                    await stream.ack(event)
            if self.paused and len(self.held) < HELD // 2:
                self.paused = False
                self.pause(False)

    async def copy(self, events: list[Any]) -> int:
        """Copy ``events`` (import records) into the jobs topic and wait for the broker; returns
        how many were copied."""
        fresh: list[tuple[int, str, bytes | None]] = []
        for event in events:
            part = event.message.partition
            if stale(self.jobs.get_in(part, event.key), event.value):
                log.info("import of job %s (partition %d offset %d) older than its current "
                         "definition; dropped", event.key.decode(), part, event.message.offset)
                continue
            fresh.append((part, event.key.decode(), event.value))
        by_partition: dict[int, list[tuple[str, bytes | None]]] = {}
        for part, key, value in fresh:
            by_partition.setdefault(part, []).append((key, value))
        self.window.copied(len(fresh))
        await asyncio.gather(*(self.emitter.acked(JOBS, records, part, {IMPORTED: b"1"})
                               for part, records in by_partition.items()))
        return len(fresh)

    def revoked(self, partitions: set[int]) -> None:
        """Partitions went to another worker: their held records are its to copy (left
        unacknowledged), and the window's count of this worker's copies starts again."""
        self.held = deque(item for item in self.held
                          if item[1].message.partition not in partitions)
        self.window.reset()


def register(rt: Any, jobs: Any, window: ImportWindow) -> Importer:
    """The import sub-topology on ``rt``'s app: the import topic's agent, copying into the jobs
    table's topic (``jobs``: the scheduler's jobs table, to drop stale imports)."""
    app = rt.app
    importer = Importer(jobs, lambda: Emitter(rt.settings.bootstrap, f"imports-{rt.worker_id}"),
                        window, rt.pauser(JOB_IMPORTS))
    imports_topic = rt.topic(JOB_IMPORTS)

    @app.agent(imports_topic, name=f"{__name__}.import_jobs")
    async def import_jobs(stream: Any) -> Any:
        acking = stream.noack()
        importer.start_copier()
        async for event in acking.events():
            importer.hold(acking, event)  # never waits: see Importer

    @app.on_partitions_revoked.connect
    async def _on_revoked(app: Any, revoked: set[Any], **kwargs: Any) -> None:
        importer.revoked({tp.partition for tp in revoked if tp.topic == JOB_IMPORTS.name})

    return importer
