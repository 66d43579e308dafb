"""State stores that stay right when a worker was paused past its session timeout (a zombie).

faust keeps, per table partition, a *persisted offset*: recovery after a rebalance reads the
changelog only after it and trusts the local RocksDB for everything before. faust advances it on
every acknowledged changelog write of this process, which is sound while this process is the
partition's only writer. A zombie is not: paused (SIGSTOP, a long GC, a frozen VM) past its
session timeout, it wakes up and writes once or twice (a chunk's intent, a done mark) *after* the
partition's new owner has written many records. Its persisted offset jumps past the new owner's
records, and when the partition comes back to it, recovery skips them. The fault suite caught
exactly that: a zombie re-sent 92 chunks the other worker had already sent, because its table
never learned they were done.

``GuardedTable`` therefore advances the persisted offset only over an unbroken run of this
process's own writes; a foreign record in the run stops it, so the next recovery reads from there.
A table whose values form a monotonic state machine (``rank``: the send-chunk table's
``intent`` → ``done``) also refuses, while recovering, to move a key backwards: a zombie's late
``intent`` after the owner's ``done`` leaves the chunk done. Such keys are remembered in
``regressions`` so the owner re-asserts them in the changelog (compaction could otherwise keep
only the zombie's record).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import faust
from faust.types import TP
from rocksdict import WriteBatch

log = logging.getLogger(__name__)

MAX_PENDING = 100_000  # own acked offsets waiting behind a gap; past this, give up (re-read)


def contiguous_advance(persisted: int | None, acked: int, pending: set[int]) -> int | None:
    """The new persisted offset after this process's write at ``acked`` was acknowledged, or None
    to leave it. ``pending`` holds own acknowledged offsets not yet joined to the run (acks
    may arrive out of order); a gap that is someone else's record never closes."""
    start = -1 if persisted is None else persisted
    if acked <= start:
        return None
    pending.add(acked)
    through = start
    while through + 1 in pending:
        through += 1
        pending.discard(through)
    if len(pending) > MAX_PENDING:
        pending.clear()
    return through if through != start else None


def regresses(rank: Mapping[bytes, int], before: bytes | None, after: bytes | None) -> bool:
    """Would writing ``after`` over ``before`` move a key backwards in its state machine?"""
    if before is None or after is None or before not in rank or after not in rank:
        return False
    return rank[after] < rank[before]


class GuardedTable(faust.Table):
    def __init__(self, app: Any, *, rank: Mapping[bytes, int] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.rank = dict(rank or {})
        self.regressions: set[bytes] = set()
        self._own_acked: dict[Any, set[int]] = {}
        self._awaiting_ack: dict[bytes, asyncio.Future[None]] = {}
        # called with every batch of changelog records once RocksDB holds them (recovery and
        # standby alike): what keeps a standby's due index warm (streams.scheduling.warm_index)
        self.on_applied: Callable[[list[Any]], None] | None = None

    async def put_acked(self, key: bytes, value: bytes, timeout_s: float = 30.0) -> None:
        """Write ``key`` (inside a stream event, as any table write) and return once the broker
        has acknowledged its changelog record: a durable intent before a send that must not
        repeat. The changelog record goes first and the local RocksDB is written once it is
        acknowledged (faust's ``__setitem__`` does both, store first): a worker SIGKILLed while
        the record was on its way, restarted on its own RocksDB, found the intent there though
        the changelog never had it and no request had left, and recorded the chunk ``unknown``
        (7 chunks of a 100k campaign, seen by the fault suite's checker: issue 48). Why not
        ``app.producer.flush()``: that waits for *every* buffered message, and faust's buffer
        wakes each waiting flush once per message sent, so sixty-four chunks in flight cost 11 %
        of a worker's GIL time in wake-ups alone. TimeoutError when the record is not
        acknowledged in ``timeout_s``: the caller treats the write as maybe-made, and so does
        the local store (written whatever the answer)."""
        waiter = asyncio.get_running_loop().create_future()
        self._awaiting_ack[key] = waiter
        self.on_key_set(key, value)  # the changelog record
        try:
            async with asyncio.timeout(timeout_s):
                await waiter
        finally:
            if self._awaiting_ack.get(key) is waiter:
                del self._awaiting_ack[key]
            self.data[key] = value  # the local store, once the broker holds the record

    def _on_changelog_sent(self, fut: Any) -> None:
        waiter = self._awaiting_ack.pop(fut.message.key, None)
        try:
            res = fut.result()
        except BaseException as exc:
            if waiter is not None and not waiter.done():
                waiter.set_exception(exc)
            raise
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        tp, offset = res.topic_partition, res.offset
        advanced = contiguous_advance(self.data.persisted_offset(tp), offset,
                                      self._own_acked.setdefault(tp, set()))
        if advanced is not None:
            self.data.set_persisted_offset(tp, advanced)

    def write(self, partition: int, rows: list[tuple[bytes, bytes | None]]) -> None:
        """Write ``rows`` (key, value; None deletes) to ``partition``'s RocksDB in one write batch,
        before their changelog records are acknowledged, as faust's ``__setitem__`` writes its
        store first (``streams.scheduling.applying``: the scheduler decides from them at once).
        The persisted offset is not moved: ``write_acked`` moves it once the broker has them."""
        if not rows:
            return
        batch = WriteBatch(raw_mode=True)
        for key, value in rows:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        self.data._db_for_partition(partition).write(batch)  # noqa: SLF001

    def write_acked(self, partition: int, rows: list[tuple[bytes, bytes]],
                    offsets: range | None) -> None:
        """Write ``rows`` (key, value) that this process produced to the table's changelog
        itself and the broker acknowledged at ``offsets`` (in order; None when other writers'
        records came between them): one RocksDB write batch for them and the persisted offset,
        advanced as ``_on_changelog_sent`` advances it, over an unbroken run of this process's
        own offsets. Why not ``table[key] = value``: that is one changelog send through faust's
        buffer (a loop turn each) and one RocksDB write and offset update per key; the executor
        writes a spike's done marks a batch at a time."""
        tp = TP(self.changelog_topic.get_topic_name(), partition)
        batch = WriteBatch(raw_mode=True)
        for key, value in rows:
            batch.put(key, value)
        if offsets is not None:
            own = self._own_acked.setdefault(tp, set())
            persisted = through = self.data.persisted_offset(tp)
            for offset in offsets:
                advanced = contiguous_advance(through, offset, own)
                through = advanced if advanced is not None else through
            if through != persisted and through is not None:
                batch.put(self.data.offset_key, str(through).encode())
        self.data._db_for_partition(partition).write(batch)  # noqa: SLF001

    def apply_changelog_batch(self, batch: Iterable[Any]) -> None:
        events = list(batch)
        if not self.rank:
            super().apply_changelog_batch(events)
            if self.on_applied is not None:
                self.on_applied(events)
            return
        kept: list[Any] = []
        latest: dict[tuple[int, bytes], bytes | None] = {}
        ends: dict[Any, int] = {}
        for event in events:
            msg = event.message
            ends[msg.tp] = max(msg.offset, ends.get(msg.tp, -1))
            slot = (msg.partition, msg.key)
            before = latest[slot] if slot in latest else self.get_in(msg.partition, msg.key)
            if regresses(self.rank, before, msg.value):
                log.warning("table %s partition %d offset %d: %r over %r ignored (a late write "
                            "of a worker that had lost the partition)", self.name, msg.partition,
                            msg.offset, msg.value, before)
                self.regressions.add(msg.key)
                continue
            latest[slot] = msg.value
            kept.append(event)
        super().apply_changelog_batch(kept)
        for tp, offset in ends.items():  # skipped records are read: do not read them again
            self.data.set_persisted_offset(tp, offset)
        if self.on_applied is not None:
            self.on_applied(kept)

    def get_in(self, partition: int, key: bytes) -> bytes | None:
        """The value of ``key`` in ``partition``'s RocksDB. Why not ``table.get``: outside a stream
        event (a punctuator) faust does not know the key's partition and looks in the database of
        every assigned partition, so a miss (the done table's common answer) costs one RocksDB
        read per partition, plus faust's mapping layers: 26 % of the scheduler's time in a spike."""
        value: bytes | None = self.data._db_for_partition(partition).get(key)  # noqa: SLF001
        return value

    def items_in(self, partition: int, from_key: bytes | None = None
                 ) -> Iterator[tuple[bytes, bytes]]:
        """Every key and value of ``partition``'s RocksDB in key order from ``from_key`` on
        (the start when None), but faust's offset key. Why not ``items()``: that walks every
        assigned partition through faust's mapping layers, and telling which partition a key
        belongs to then takes a murmur2 hash in Python (9 µs a key, a tenth of rebuilding a due
        index). Each call is a fresh RocksDB iterator, a snapshot of that moment."""
        db = self.data._db_for_partition(partition)  # noqa: SLF001
        offset_key = self.data.offset_key
        for key, value in db.items(from_key=from_key):
            if key != offset_key:
                yield key, value
