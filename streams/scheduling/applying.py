"""The jobs topic applied a batch at a time: the jobs table (RocksDB and its changelog) and the due
index, for the worker's partitions.

    cronstream.jobs ──▶ PartitionReader (librdkafka, group cronstream-jobs) ──▶ [apply_jobs]
                            ──▶ table jobs: one RocksDB write batch per partition, now
                            ──▶ cronstream-jobs-changelog: one librdkafka batch, acknowledged
                            ──▶ the due index (``Partitions.track``), now

Why not a faust agent: faust delivered the records one per event-loop turn and sent each
changelog record through its own producer; a million-job import was applied at about 2,000 jobs a
second per worker, four fifths of it faust's delivery and sends (issue 44).

A batch's commit protocol, in order (``apply`` and ``_acknowledged``):

1. read: the reader hands over a batch; records of a partition this worker no longer holds are
   dropped (its next owner reads them from the commit);
2. decided: an import's copy older than what the table holds is dropped (``imports.stale``),
   reading the table as this batch has written it so far;
3. applied: the records are written to RocksDB (one write batch per partition) and the due
   index, at once, as faust's table did: the scheduler decides from them from now on;
4. changelog: the same records go to the table's changelog in one librdkafka batch;
5. commit: once the broker has acknowledged them, the table's persisted offset advances over
   this worker's own contiguous run (``GuardedTable.write_acked``) and the reader commits the
   jobs partitions past the batch (never backwards: batches can be acknowledged out of order).

A crash anywhere before 5 reads the records again from the commit and applies them again, in
order: the same puts and deletes, so nothing changes twice. A changelog batch the broker refused
rewinds its partitions to their commit (the reader reads them again), so the changelog again gets
every record after the commit in order, and a later value is never overtaken by an earlier one
sent again on its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from streams.runtime.codec import codec
from streams.runtime.emit import Landed
from streams.runtime.partition_reader import Assigned, Notice
from streams.scheduling.imports import ImportWindow, imported, stale
from streams.topology import TopicSpec

log = logging.getLogger(__name__)


class Table(Protocol):
    """The jobs table as the applier needs it (``streams.runtime.guarded_table.GuardedTable``)."""

    def get_in(self, partition: int, key: bytes) -> bytes | None: ...
    def write(self, partition: int, rows: list[tuple[bytes, bytes | None]]) -> None: ...
    def write_acked(self, partition: int, rows: list[tuple[bytes, bytes]],
                    offsets: range | None) -> None: ...


class Producer(Protocol):
    def acked_offsets(self, topic: TopicSpec, by_partition: dict[int, list[tuple[str, bytes | None]]]
                      ) -> asyncio.Future[list[Landed]]: ...


class Reader(Protocol):
    """The jobs topic's reader as the applier drives it (``PartitionReader``)."""

    def assign(self, partitions: set[int]) -> None: ...
    def revoke(self, partitions: set[int]) -> None: ...
    def commit(self, offsets: dict[int, int], on_failed: Callable[[int, int], None]) -> None: ...


class Index(Protocol):
    """The due index's side (``streams.scheduling.partitions.Partitions``)."""

    def track(self, partition: int, job: dict[str, Any], live: bool = False) -> None: ...
    def untrack(self, partition: int, job_id: str) -> None: ...


@dataclass(slots=True)
class Applied:
    """What one batch wrote to one partition: the rows, and the jobs offset to commit after."""

    rows: list[tuple[str, bytes | None]] = field(default_factory=list)
    next_offset: int = 0


def decide(messages: list[Any], current: Callable[[int, bytes], bytes | None]
           ) -> tuple[dict[int, Applied], int]:
    """The rows a batch writes, per partition, in order, and how many of its records were
    imports' copies (applied or not: each gives its room in the window back). An import's copy
    older than the table's value (``current``, as this batch has written it so far) is
    dropped. Pure: the table is read through ``current`` only."""
    by_partition: dict[int, Applied] = {}
    written: dict[tuple[int, bytes], bytes | None] = {}
    copies = 0
    for msg in messages:
        part, key, value = msg.partition(), msg.key(), msg.value()
        applied = by_partition.setdefault(part, Applied())
        applied.next_offset = msg.offset() + 1
        if imported(msg.headers()):
            copies += 1
            held = written[(part, key)] if (part, key) in written else current(part, key)
            if stale(held, value):
                log.info("import of job %s (partition %d offset %d) is older than its current "
                         "definition; not applied", key.decode(), part, msg.offset())
                continue
        written[(part, key)] = value
        applied.rows.append((key.decode(), value))
    return by_partition, copies


class JobApplier:
    def __init__(self, table: Table, producer: Producer, changelog: TopicSpec, reader: Reader,
                 index: Index, window: ImportWindow) -> None:
        self.table, self.producer, self.changelog = table, producer, changelog
        self.reader, self.index, self.window = reader, index, window
        self.assigned: set[int] = set()
        # partitions whose changelog batch was refused, read again from their commit: until
        # their new start is announced, what was read before is dropped and nothing committed
        self.rewinding: set[int] = set()
        self._committed: dict[int, int] = {}  # partition -> the offset last asked to commit
        self.applied = 0  # records applied (for the metrics and the benchmarks)

    # -- assignment (the worker's recovery and revocation) ---------------------------------------
    def assign(self, partitions: set[int]) -> None:
        """The worker holds ``partitions`` now, their table recovered: read them from their
        commit."""
        new = partitions - self.assigned
        self.assigned |= new
        if new:
            self.reader.assign(new)

    def revoke(self, partitions: set[int]) -> None:
        """``partitions`` went away: what is read or acknowledged for them from now on is not
        this worker's to apply or commit (their next owner reads from the commit)."""
        gone = partitions & self.assigned
        self.assigned -= gone
        for part in gone:
            self._committed.pop(part, None)
        if gone:
            self.reader.revoke(gone)

    # -- batches (on the event loop) -------------------------------------------------------------
    def deliver(self, notice: Notice) -> None:
        """The reader's notices, in order: an assignment's start, or a batch of records."""
        if isinstance(notice, Assigned):
            for part, start in notice.starts.items():
                self.rewinding.discard(part)
                if start is not None:
                    self._committed[part] = start
            return
        self.apply(notice)

    def apply(self, messages: list[Any]) -> None:
        mine = [msg for msg in messages
                if msg.partition() in self.assigned and msg.partition() not in self.rewinding]
        if not mine:
            return
        by_partition, copies = decide(mine, self.table.get_in)
        self.window.applied(copies)
        decode = codec().decode
        for part, applied in by_partition.items():
            self.table.write(part, [(key.encode(), value) for key, value in applied.rows])
            for key, value in applied.rows:
                if value is None:
                    self.index.untrack(part, key)
                else:
                    self.index.track(part, decode(value), live=True)
            self.applied += len(applied.rows)
        sent = self.producer.acked_offsets(self.changelog, {
            part: applied.rows for part, applied in by_partition.items() if applied.rows})
        sent.add_done_callback(lambda future: self._acknowledged(by_partition, future))

    def _acknowledged(self, by_partition: dict[int, Applied],
                      future: asyncio.Future[list[Landed]]) -> None:
        held = {part for part in by_partition
                if part in self.assigned and part not in self.rewinding}
        if future.cancelled() or future.exception() is not None:
            error: Any = "cancelled" if future.cancelled() else future.exception()
            log.error("jobs changelog batch not acknowledged (%s): partitions %s read again from "
                      "their commit", error, sorted(held))
            self.rewinding |= held
            self.reader.revoke(held)  # then read again from the commit, in order
            self.reader.assign(held)
            return
        for partition, first, last, count in future.result():
            if partition not in held:
                continue
            # contiguous unless another writer's record came between two of ours (a zombie's):
            # then the persisted offset must not pass them (``GuardedTable``)
            own = range(first, last + 1) if last - first + 1 == count else None
            self.table.write_acked(partition, [], own)
        offsets = {part: applied.next_offset for part, applied in by_partition.items()
                   if part in held and applied.next_offset > self._committed.get(part, -1)}
        self._committed.update(offsets)
        self.reader.commit(offsets, self._commit_failed)

    def _commit_failed(self, partition: int, offset: int) -> None:
        """A commit the broker refused: the next batch's commit carries it (harmless meanwhile:
        a crash re-applies from the older commit)."""
        if self._committed.get(partition) == offset:
            del self._committed[partition]
