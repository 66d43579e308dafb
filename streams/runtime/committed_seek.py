"""Seek a worker's stream partitions to a committed offset of 0 too.

After every rebalance faust's recovery seeks the stream partitions to their committed offsets,
and that seek is what re-delivers records the previous moments of the rebalance fetched but never
handed to an agent. aiokafka's ``seek_to_committed`` skips any partition whose committed offset
is 0 (``if offset and offset > 0``), and the workers' group has exactly that on every partition
never consumed past its first record (``admin.seed_group_offsets`` commits the log start). So a
fan-out order at offset 0, fetched during the window and lost there, was never fetched again:
the worker that took over from a SIGKILLed one never walked its partitions and the campaign
stalled (the fault suite's SIGKILL scenario, 2 of 3 fresh-clone runs). ``install`` replaces
faust's seek with one that seeks those partitions as well.

A second loss of the same kind: faust's fetch loop drops, without a word, the records a fetch
brought for a partition that is not active yet (still recovering after a rebalance), while
the fetch position has already moved past them. If that fetch lands after the seek to the
committed offsets, nothing rewinds: the partition's agent first sees a later record, faust
counts the records in between as a compacted-away gap, and either commits past them (slots the
failover benchmark then found without a decision) or stalls at the committed offset for good
(``streams.runtime.commit_watch``). ``install`` also wraps the fetch so the position of such a
partition goes back to its first dropped record: fetched again once the partition is active.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from faust.transport.consumer import Consumer
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

log = logging.getLogger(__name__)
_fetch = Consumer._wait_next_records  # noqa: SLF001 - faust's own, wrapped below


async def seek_to_committed(consumer: Any) -> Mapping[Any, int]:
    """aiokafka's seek to the committed offsets, plus the partitions it skips (committed 0)."""
    committed: Mapping[Any, int] = await consumer.seek_to_committed()
    for tp, offset in committed.items():
        if offset == 0:
            consumer.seek(tp, 0)
    return committed


async def _thread_seek_to_committed(self: AIOKafkaConsumerThread) -> Mapping[Any, int]:
    consumer = self._ensure_consumer()  # noqa: SLF001 - faust's own accessor, same use
    return await self.call_thread(seek_to_committed, consumer)  # type: ignore[no-any-return]


def dropped_starts(records: Mapping[Any, list[Any]], active: set[Any] | None,
                   buffered: set[Any], acknowledged: Any) -> dict[Any, int]:
    """Partition -> first offset of the fetched records faust is about to drop because the
    partition is not active (of the topics whose records agents acknowledge)."""
    if active is None:
        return {}
    return {tp: batch[0].offset for tp, batch in records.items()
            if batch and tp not in active and tp not in buffered and acknowledged(tp.topic)}


async def _wait_next_records_rewinding(self: Consumer, timeout: float) -> Any:
    records, active = await _fetch(self, timeout)
    if records:
        for tp, offset in dropped_starts(records, active, self._buffered_partitions,  # noqa: SLF001
                                         self.app.topics.acks_enabled_for).items():
            log.warning("%s partition %d: %d fetched records from offset %d arrived while the "
                        "partition is not active; fetching them again from there", tp.topic,
                        tp.partition, len(records[tp]), offset)
            if tp in self.assignment():
                await self._seek(tp, offset)  # noqa: SLF001
    return records, active


def install() -> None:
    """Make every faust consumer of this process use ``seek_to_committed`` and rewind records
    dropped for inactive partitions (idempotent)."""
    AIOKafkaConsumerThread.seek_to_committed = _thread_seek_to_committed  # type: ignore[method-assign]
    Consumer._wait_next_records = _wait_next_records_rewinding  # type: ignore[method-assign]  # noqa: SLF001
