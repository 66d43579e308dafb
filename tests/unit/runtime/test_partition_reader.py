"""The partition reader (``streams.runtime.partition_reader``) on a stand-in for librdkafka's consumer:
the order of its notices, and what it does when the broker does not answer."""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

from streams.runtime.partition_reader import Assigned, PartitionReader
from streams.topology import FIRED


class Msg:
    def __init__(self, partition: int, offset: int) -> None:
        self._at = (partition, offset)

    def partition(self) -> int:
        return self._at[0]

    def offset(self) -> int:
        return self._at[1]

    def error(self) -> None:
        return None


class Consumer:
    """librdkafka's consumer as the reader drives it: commits by partition, records fetched
    from the assigned partitions only, and a ``committed`` that can be made to fail."""

    def __init__(self, commits: dict[int, int], failures: int = 0) -> None:
        self.commits, self.failures = commits, failures
        self.assigned: dict[int, int] = {}
        self.records: queue.SimpleQueue[Msg] = queue.SimpleQueue()
        self.calls: list[tuple[str, Any]] = []
        self.lock = threading.Lock()

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        if self.failures:
            self.failures -= 1
            raise KafkaException("coordinator not available")
        return [TopicPartition(FIRED.name, tp.partition, self.commits.get(tp.partition, -1001))
                for tp in tps]

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        with self.lock:
            self.calls.append(("assign", sorted((tp.partition, tp.offset) for tp in tps)))
            self.assigned.update((tp.partition, tp.offset) for tp in tps)

    def incremental_unassign(self, tps: list[TopicPartition]) -> None:
        with self.lock:
            self.calls.append(("unassign", sorted(tp.partition for tp in tps)))
            for tp in tps:
                self.assigned.pop(tp.partition, None)

    def poll(self, timeout: float) -> Msg | None:
        try:
            msg = self.records.get(timeout=timeout)
        except queue.Empty:
            return None
        with self.lock:
            return msg if msg.partition() in self.assigned else None

    def consume(self, n: int, timeout: float) -> list[Msg]:
        return []

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> list[TopicPartition]:
        self.calls.append(("commit", sorted((tp.partition, tp.offset) for tp in offsets)))
        return offsets

    def close(self) -> None:
        pass


def read_notices(consumer: Consumer, script: Any, until: int) -> list[Any]:
    """Run a reader on ``consumer``; ``script(reader)`` drives it; the first ``until`` notices."""
    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        notices: list[Any] = []
        enough = loop.create_future()

        def deliver(notice: Any) -> None:
            notices.append(notice)
            if len(notices) >= until and not enough.done():
                enough.set_result(None)

        reader = PartitionReader("127.0.0.1:1", "test", FIRED, consumer_factory=lambda config: consumer)
        reader.start(loop, deliver)
        try:
            script(reader)
            async with asyncio.timeout(30):
                await enough
        finally:
            reader.close()
        return notices

    return asyncio.run(main())


def test_a_partition_is_read_from_its_commit_and_announced_before_its_records():
    consumer = Consumer({0: 40})
    consumer.records.put(Msg(0, 40))
    notices = read_notices(consumer, lambda reader: reader.assign({0, 1}), until=2)
    assert notices[0] == Assigned({0: 40, 1: None}), "a partition without a commit: unknown"
    assert [(m.partition(), m.offset()) for m in notices[1]] == [(0, 40)]
    assert consumer.calls[0] == ("assign", [(0, 40), (1, OFFSET_BEGINNING)])


def test_commits_that_cannot_be_read_are_asked_again_and_nothing_is_read_meanwhile():
    consumer = Consumer({3: 7}, failures=2)
    notices = read_notices(consumer, lambda reader: reader.assign({3}), until=1)
    assert notices == [Assigned({3: 7})]
    assert consumer.calls == [("assign", [(3, 7)])]


def test_a_revoked_partition_is_committed_then_unassigned_in_the_order_asked():
    consumer = Consumer({0: 0, 1: 0})

    def script(reader: PartitionReader) -> None:
        reader.assign({0, 1})
        reader.commit({0: 12}, lambda p, o: None)
        reader.revoke({0})
        reader.assign({0})  # assigned again: read from its commit again
    notices = read_notices(consumer, script, until=2)
    assert notices == [Assigned({0: 0, 1: 0}), Assigned({0: 0})]
    assert consumer.calls == [("assign", [(0, 0), (1, 0)]), ("commit", [(0, 12)]),
                              ("unassign", [0]), ("assign", [(0, 0)])]


def test_with_a_bound_no_more_batches_wait_on_the_loop_than_it_allows():
    """A loop busy applying one batch has at most ``handed_at_most`` more queued: the reader
    waits instead of reading on (twenty batches queued once blocked the loop for seconds)."""
    consumer = Consumer({0: 0})
    for offset in range(20):
        consumer.records.put(Msg(0, offset))

    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        seen: list[Any] = []

        def deliver(notice: Any) -> None:
            seen.append(notice)
            if len(seen) == 2:  # the first batch: hold the loop while the reader goes on
                threading.Event().wait(0.5)
                left.append(consumer.records.qsize())
            if len(seen) == 21 and not done.done():
                done.set_result(None)
        left: list[int] = []
        reader = PartitionReader("127.0.0.1:1", "test", FIRED, consumer_factory=lambda c: consumer,
                                 batch=1, handed_at_most=1)
        reader.start(loop, deliver)
        try:
            reader.assign({0})
            async with asyncio.timeout(30):
                await done
        finally:
            reader.close()
        return left[0], len(seen)

    left, seen = asyncio.run(main())
    assert left >= 18, "while the loop held one batch the reader read one more, not the rest"
    assert seen == 21, "and every record came once the loop was free"
