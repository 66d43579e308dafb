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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread


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


def install() -> None:
    """Make every faust consumer of this process use ``seek_to_committed`` (idempotent)."""
    AIOKafkaConsumerThread.seek_to_committed = _thread_seek_to_committed  # type: ignore[method-assign]
