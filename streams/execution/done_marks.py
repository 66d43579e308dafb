"""The done table's writes, in batches: which fire ids have run (their outcome), or may have
begun to (an email's intent).

A mark is what makes a fired record's redelivery harmless (a replay, a re-drive, a backfill of a
slot that ran, a crash before the commit), so it must be durable before the executor commits
past its record, and visible at once to everyone who asks whether a fire id is done. Written
one at a time through faust's table, a spike's marks cost a changelog send each through faust's
buffer (one event-loop turn apiece) plus a RocksDB write and a persisted-offset update each:
most of what a run cost besides its HTTP call. Here:

1. ``mark`` queues the mark and makes it visible to ``get`` at once (``pending``);
2. at the end of the event loop's turn, every queued mark goes to the table's changelog in one
   librdkafka batch per partition (``Emitter.acked_offsets``: one wake when all are in);
3. once the broker has acknowledged them, one RocksDB write batch per partition holds them and
   the persisted offset (``GuardedTable.write_acked``), they leave ``pending``, and each mark's
   ``on_durable`` runs (the executor resolves its record: its commit may pass it now).

faust still reads the changelog as before: the other worker's standby replica applies these
records, and recovery after a rebalance reads what the persisted offset does not cover. A
changelog write that fails is queued again (logged): until it is acknowledged the record is not
resolved, so nothing is committed past it, and ``pending`` keeps answering for it here.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from streams.runtime.emit import Landed
from streams.topology import BEGUN, TopicSpec

log = logging.getLogger(__name__)


class Table(Protocol):
    """The done table as the marks need it (``streams.runtime.guarded_table.GuardedTable``)."""

    def get_in(self, partition: int, key: bytes) -> bytes | None: ...
    def write_acked(self, partition: int, rows: list[tuple[bytes, bytes]],
                    offsets: range | None) -> None: ...


class Producer(Protocol):
    def acked_offsets(self, topic: TopicSpec, by_partition: dict[int, list[tuple[str, bytes | None]]]
                      ) -> asyncio.Future[list[Landed]]: ...


@dataclass(slots=True)
class _Mark:
    partition: int
    fire_id: str
    value: bytes
    on_durable: Callable[[], None] | None


def _older(held: bytes | None, stashed: bytes) -> bool:
    """Whether the table's value for a fire id (``held``) is older than a mark of this worker
    acknowledged while the partition was away: none at all, or a run's mark before its outcome
    (an email's or a text's intent, or its refused attempt) that the stashed mark follows: an
    outcome, or the next of those two."""
    return held is None or (held in BEGUN and stashed != held)


class DoneMarks:
    def __init__(self, table: Table, producer: Producer, changelog: TopicSpec) -> None:
        self.table, self.producer, self.changelog = table, producer, changelog
        # fire id -> its newest mark not yet in RocksDB (queued or on its way to the broker)
        self.pending: dict[str, _Mark] = {}
        self._queued: list[_Mark] = []
        self._flush_scheduled = False
        # partitions whose RocksDB this worker holds now: a mark acknowledged after its
        # partition was revoked is on the changelog, which the next owner reads
        self.assigned: set[int] = set()
        # per partition, marks the broker acknowledged while the partition was not this
        # worker's (revoked, its run finished meanwhile): written to RocksDB if it comes back
        # (``assign``); a partition that never does keeps its few rows here, unread
        self.acked_away: dict[int, list[tuple[bytes, bytes]]] = {}
        self.batches = 0  # changelog batches acknowledged (for the benchmark's figures)

    def get(self, partition: int, fire_id: str) -> bytes | None:
        """The fire id's mark: a pending one first, else what RocksDB holds."""
        mark = self.pending.get(fire_id)
        if mark is not None:
            return mark.value
        return self.table.get_in(partition, fire_id.encode())

    def mark(self, partition: int, fire_id: str, value: bytes,
             on_durable: Callable[[], None] | None = None) -> None:
        """Queue a mark (visible to ``get`` now); ``on_durable`` runs once the broker has it."""
        entry = _Mark(partition, fire_id, value, on_durable)
        self.pending[fire_id] = entry
        self._queued.append(entry)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    async def put_acked(self, partition: int, fire_id: str, value: bytes) -> None:
        """Mark and wait until the broker has the mark: an email's durable intent before SES is
        called, so a worker that takes over after a crash knows the send may have happened."""
        durable = asyncio.get_running_loop().create_future()
        self.mark(partition, fire_id, value, lambda: durable.done() or durable.set_result(None))
        await durable

    def _flush(self) -> None:
        self._flush_scheduled = False
        queued, self._queued = self._queued, []
        if not queued:
            return
        by_partition: dict[int, list[_Mark]] = defaultdict(list)
        for entry in queued:
            by_partition[entry.partition].append(entry)
        sent = self.producer.acked_offsets(self.changelog, {
            partition: [(entry.fire_id, entry.value) for entry in entries]
            for partition, entries in by_partition.items()})
        sent.add_done_callback(lambda future: self._acknowledged(queued, by_partition, future))

    def _acknowledged(self, queued: list[_Mark], by_partition: dict[int, list[_Mark]],
                      future: asyncio.Future[list[Landed]]) -> None:
        if future.cancelled() or future.exception() is not None:
            error: Any = "cancelled" if future.cancelled() else future.exception()
            log.warning("%d done marks not acknowledged (%s): queued again; their records stay "
                        "uncommitted until they are", len(queued), error)
            for entry in queued:
                if self.pending.get(entry.fire_id) is entry:
                    self._queued.append(entry)
            if self._queued and not self._flush_scheduled:
                self._flush_scheduled = True
                asyncio.get_running_loop().call_later(0.5, self._flush)
            return
        self.batches += 1
        for partition, first, last, count in future.result():
            rows = [(entry.fire_id.encode(), entry.value) for entry in by_partition[partition]]
            if partition not in self.assigned:
                self.acked_away.setdefault(partition, []).extend(rows)
                continue
            # a partition's group is contiguous unless another writer's record came between two
            # of ours (a zombie's): then its offsets are not all ours, and the persisted offset
            # must not pass them (``GuardedTable``), so the next recovery reads them
            own = range(first, last + 1) if last - first + 1 == count else None
            try:
                self.table.write_acked(partition, rows, own)
            except Exception:  # the changelog has them: the next recovery reads them back
                log.exception("done marks of partition %d not written to RocksDB (%d marks, "
                              "offsets %d-%d); the changelog holds them", partition, count,
                              first, last)
        for entry in queued:
            if self.pending.get(entry.fire_id) is entry:
                del self.pending[entry.fire_id]
            if entry.on_durable is not None:
                entry.on_durable()

    def assign(self, partitions: set[int]) -> None:
        """``partitions`` are this worker's again, their recovery done. A mark acknowledged while
        its partition was away is on the changelog, but perhaps past the end the recovery read
        (a worker whose session expired and that rejoined within a second got its partitions
        back, and a run that finished in between was run again: issue 42's controller kill).
        Such marks are written where the table has nothing for their fire id, or only an
        email's intent that the stashed outcome follows (else the send, done, would be
        resolved ``unknown``); anything else it has is as new or newer (the recovery's, or
        another owner's since). Not as persisted offsets, so the next recovery still reads them
        from the changelog."""
        self.assigned |= partitions
        for partition in sorted(partitions):
            rows = [(key, value) for key, value in self.acked_away.pop(partition, [])
                    if _older(self.table.get_in(partition, key), value)]
            if not rows:
                continue
            try:
                self.table.write_acked(partition, rows, None)
            except Exception:  # the changelog has them: the next recovery reads them back
                log.exception("partition %d assigned again: %d done marks acknowledged while "
                              "it was away not written to RocksDB", partition, len(rows))
                continue
            log.info("partition %d assigned again: %d done marks acknowledged while it was away "
                     "written to its table (the recovery had not read them)", partition, len(rows))

    def forget(self, partition: int) -> None:
        """The partition was revoked: its RocksDB is no longer this worker's to write."""
        self.assigned.discard(partition)
