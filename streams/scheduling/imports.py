"""Bulk job imports: paced into the jobs topic, so a million jobs never queue ahead of a change.

    API (POST /v1/job-imports) ──▶ cronstream.job-imports ──▶ [import_jobs] ──▶ cronstream.jobs
                                                          (at most ``WINDOW`` copies unapplied)

Why a second topic: ``apply_jobs`` applies a partition's job records in order, a few thousand a
second per worker. Written straight to ``cronstream.jobs``, a tenant's million-job import (or
delete) put every other tenant's new job behind it: a campaign tick created during such a backlog
went live 143 s late. Imports wait on their own topic instead, and each worker copies those of
its partitions into the jobs topic only while fewer than ``WINDOW`` of its copies are unapplied,
so a job created or changed through ``/v1/jobs`` waits behind at most a window (about a second
of applying), whatever is being imported.

Why a thread with its own consumer, not a faust agent: the copier must wait for ``apply_jobs``,
and an agent that waits stops every agent of its worker (faust hands records to them one at a
time), ``apply_jobs`` included: a deadlock, seen on the first try. Pausing the agent's partitions
instead lost records: faust drops what it fetched for a partition paused before delivery, and
commits past the gap. The thread reads the import partitions of the jobs partitions its worker
owns (assigned by hand, offsets committed under ``GROUP`` once copied), so its copies are applied
by the same worker, which gives the window back (``ImportWindow.applied``).

A copy older than what the jobs table holds (``stale``) is dropped by ``apply_jobs``, where the
table is current: a job created by import and changed through the API before the import reached
it keeps the change.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from streams.runtime.codec import codec
from streams.runtime.kafka_config import client_config
from streams.topology import JOB_IMPORTS, JOBS, OWNED

log = logging.getLogger(__name__)

# import records copied to the jobs topic and not yet applied, per worker: with apply_jobs at
# 1-4k records/s per worker (bench.churn), at most a second of applying is ahead of an API change
WINDOW = 1_000
BATCH = 500  # import records read and copied at a time
GROUP = "cronstream-imports"  # where the copiers commit how far they have copied
IMPORTED = "cronstream-import"  # a header on the copies, so apply_jobs gives their room back


class ImportWindow:
    """How many copies this worker has made that ``apply_jobs`` has not applied yet. The copier
    (its own thread) waits while it is full; ``applied`` is called on the event loop's. Reset on
    a rebalance: copies of a partition that went to another worker are applied there."""

    def __init__(self, size: int = WINDOW) -> None:
        self.size = size
        self.unapplied = 0
        self._changed = threading.Condition()

    def room(self, timeout_s: float) -> int:
        """How many copies may be made now, waiting up to ``timeout_s`` for some room."""
        with self._changed:
            self._changed.wait_for(lambda: self.unapplied < self.size, timeout_s)
            return max(0, self.size - self.unapplied)

    def copied(self, count: int) -> None:
        with self._changed:
            self.unapplied += count

    def applied(self, count: int = 1) -> None:
        with self._changed:
            self.unapplied = max(0, self.unapplied - count)
            self._changed.notify_all()

    def reset(self) -> None:
        with self._changed:
            self.unapplied = 0
            self._changed.notify_all()


def stale(current: bytes | None, incoming: bytes | None) -> bool:
    """Whether an import's copy is older than what the jobs table holds for its job: a put whose
    revision is not above the current one's, or a delete of a job that is not there (nothing to
    delete; the copy of an earlier import delivered again must not delete a later job)."""
    if incoming is None:
        return current is None
    if current is None:
        return False
    revision: int = codec().decode(incoming)["revision"]
    current_revision: int = codec().decode(current)["revision"]
    return revision <= current_revision


def imported(headers: list[tuple[str, bytes]] | None) -> bool:
    """Whether a jobs-topic record is an import's copy (its ``IMPORTED`` header; librdkafka's
    headers, a list of name and value)."""
    return bool(headers) and any(name == IMPORTED for name, _ in headers or ())


class Copier:
    """The copying loop, run by the worker's import thread: read what the window has room for
    from the assigned import partitions, produce it to the same partitions of the jobs topic,
    wait for the broker, then commit. A crash between the produce and the commit copies a batch
    twice: the second copy is ``stale`` and dropped."""

    def __init__(self, consumer: Any, produce: Callable[[int, list[tuple[str, bytes | None]]], None],
                 window: ImportWindow) -> None:
        self.consumer = consumer  # confluent_kafka.Consumer, group GROUP, assigned by hand
        self.produce = produce  # (partition, records): produced and acknowledged, or raises
        self.window = window
        self._wanted: set[int] | None = None  # the partitions to read from, when changed
        self._lock = threading.Lock()
        self.stopped = threading.Event()

    def assign(self, partitions: set[int]) -> None:
        """The worker's jobs partitions changed (a rebalance): read these from now on."""
        with self._lock:
            self._wanted = set(partitions)
        self.window.reset()

    def step(self, wait_s: float = 0.5) -> int:
        """One round: take up the assignment if it changed, then copy what there is room for;
        returns how many records were copied."""
        from confluent_kafka import OFFSET_STORED, TopicPartition

        with self._lock:
            wanted, self._wanted = self._wanted, None
        if wanted is not None:
            self.consumer.assign([TopicPartition(JOB_IMPORTS.name, p, OFFSET_STORED)
                                  for p in sorted(wanted)])
        if not self.consumer.assignment():
            self.stopped.wait(wait_s)
            return 0
        room = self.window.room(wait_s)
        if not room:
            return 0
        messages = [m for m in self.consumer.consume(min(BATCH, room), wait_s) if not m.error()]
        if not messages:
            return 0
        by_partition: dict[int, list[tuple[str, bytes | None]]] = {}
        ends: dict[int, int] = {}
        for m in messages:
            by_partition.setdefault(m.partition(), []).append((m.key().decode(), m.value()))
            ends[m.partition()] = m.offset() + 1
        try:
            for part, records in by_partition.items():
                self.produce(part, records)
        except Exception:
            firsts = {m.partition(): m.offset() for m in reversed(messages)}
            log.exception("import copy of %d records failed; partitions %s read again from "
                          "offsets %s", len(messages), sorted(firsts), firsts)
            for part, offset in firsts.items():
                self.consumer.seek(TopicPartition(JOB_IMPORTS.name, part, offset))
            return 0
        self.window.copied(len(messages))
        self.consumer.commit(offsets=[TopicPartition(JOB_IMPORTS.name, p, end)
                                      for p, end in ends.items()], asynchronous=False)
        return len(messages)

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                self.step()
            except Exception:  # a thread that dies copies nothing again: log and go on
                log.exception("import copier round failed")
                self.stopped.wait(1.0)


def start(bootstrap: str, worker_id: str, window: ImportWindow) -> Copier:
    """The worker's import thread (a daemon: a worker that stops leaves the rest uncommitted,
    to be copied by the partitions' next owner)."""
    from confluent_kafka import Consumer

    from streams.runtime.emit import Emitter

    emitter = Emitter(bootstrap, f"imports-{worker_id}")

    def produce(partition: int, records: list[tuple[str, bytes | None]]) -> None:
        emitter.produce_all(JOBS, records, partition, headers={IMPORTED: b"1"})
        if emitter.flush(30):
            raise RuntimeError("the broker did not acknowledge an import copy within 30 s")

    consumer = Consumer({**client_config(bootstrap), "group.id": GROUP,
                         "client.id": f"imports-{worker_id}", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    copier = Copier(consumer, produce, window)
    threading.Thread(target=copier.run, name="import-copier", daemon=True).start()
    return copier


def register(rt: Any, window: ImportWindow) -> None:
    """The import copier of ``rt``'s worker: started at the first assignment, and told the
    worker's jobs partitions at every rebalance."""
    app = rt.app
    copier: list[Copier] = []

    @app.on_partitions_assigned.connect
    async def _on_assigned(app: Any, assigned: set[Any], **kwargs: Any) -> None:
        if not copier:
            copier.append(start(rt.settings.bootstrap, rt.worker_id, window))
        copier[0].assign({tp.partition for tp in assigned if tp.topic == OWNED.name})

    @app.on_partitions_revoked.connect
    async def _on_revoked(app: Any, revoked: set[Any], **kwargs: Any) -> None:
        if copier:
            copier[0].assign(set())
