"""The one way cronstream writes to Kafka: a librdkafka producer (confluent-kafka).

Why not faust's ``topic.send``: measured at ~20k records/s inside a worker against ~760k/s for a
librdkafka producer in the same process; fires and fan-out are bulk emission. The partitioner is
``murmur2_random`` so a key lands on the same partition as faust/Java clients put it, which keeps
jobs, fired records and tables co-partitioned.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from streams.runtime.kafka_config import producer_config
from streams.topology import TopicSpec

log = logging.getLogger(__name__)

DeliveryCallback = Callable[[KafkaError | None, Message], None]
Delivered = tuple[int, int, bytes]  # where an acknowledged record landed: partition, offset, key
# where a group of records on one partition landed: partition, first offset, last offset, and
# how many records it holds (contiguous when last - first + 1 == that count)
Landed = tuple[int, int, int, int]


class Emitter:
    """A librdkafka producer and the thread that polls it for deliveries, both made at the
    first record (building a worker's sub-topologies connects nowhere)."""

    def __init__(self, bootstrap: str, client_id: str, **overrides: Any) -> None:
        # acks=all and idempotence (producer_config): an acknowledged record is on every
        # in-sync replica, and a retry after a lost answer writes no duplicate
        self._config: dict[str, Any] = {
            **producer_config(bootstrap),
            "client.id": client_id,
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            **overrides,
        }
        self._made: Producer | None = None
        self._making = threading.Lock()
        self._closed = threading.Event()
        self._poller: threading.Thread | None = None

    @property
    def _producer(self) -> Producer:
        made = self._made
        if made is None:
            with self._making:
                if self._made is None:
                    self._made = Producer(self._config)
                    self._poller = threading.Thread(
                        target=self._poll_loop, args=(self._made,),
                        name=f"{self._config['client.id']}-poll", daemon=True)
                    self._poller.start()
                made = self._made
        return made

    def _poll_loop(self, producer: Producer) -> None:
        while not self._closed.is_set():
            producer.poll(0.05)

    def produce(self, topic: TopicSpec, key: str, value: bytes | None,
                partition: int | None = None, on_delivery: DeliveryCallback | None = None,
                headers: dict[str, str | bytes] | None = None) -> None:
        """Queue one record; the callback runs on the poll thread when the broker answers.

        ``partition`` places a record keyed by something else on its job's partition."""
        self.produce_all(topic, ((key, value),), partition, on_delivery, headers)

    def produce_all(self, topic: TopicSpec, records: Iterable[tuple[str, bytes | None]],
                    partition: int | None = None, on_delivery: DeliveryCallback | None = None,
                    headers: dict[str, str | bytes] | None = None) -> None:
        """Queue ``records`` (key, value) in order, as ``produce`` queues one. One loop for many:
        a spike's round queues hundreds of fired records, and what ``produce`` does around the
        call into librdkafka (its arguments built again) was a real share of a slot's cost."""
        extra: dict[str, Any] = {"on_delivery": on_delivery}
        if headers:
            extra["headers"] = list(headers.items())
        name, produce = topic.name, self._producer.produce
        part = -1 if partition is None else partition  # -1: librdkafka's partitioner decides
        for key, value in records:
            while True:
                try:
                    produce(name, value, key.encode(), part, **extra)
                    break
                except BufferError:  # local queue full: wait for deliveries, never drop
                    self._producer.poll(0.05)

    def acked(self, topic: TopicSpec, records: Sequence[tuple[str, bytes | None]],
              partition: int | None = None,
              headers: dict[str, str | bytes] | None = None) -> asyncio.Future[None]:
        """Produce ``records`` (key, value); the future resolves once the broker has acknowledged
        all of them, or fails with the first error. Why not ``flush()``: a flush waits for every
        record of every caller sharing this producer, so sixteen fan-out walkers each waiting for
        the others' ledger records ran in convoy. Why one future per batch: waking the event loop
        from the delivery thread is a syscall, and one per recipient was a real share of a
        saturated fan-out's CPU."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        if not records:
            done.set_result(None)
            return done
        countdown = _Countdown(_reports(records, partition), lambda error: loop.call_soon_threadsafe(
            _resolve, done, error))
        self._produce_reported(topic, records, partition, countdown, headers)
        return done

    def _produce_reported(self, topic: TopicSpec, records: Sequence[tuple[str, bytes | None]],
                          partition: int | None, countdown: _Countdown,
                          headers: dict[str, str | bytes] | None = None) -> None:
        """Produce a group of records whose acknowledgement ``countdown`` waits for, asking for
        only the delivery reports ``_reports`` counts. Why not one each: a report with a Python
        callback takes the GIL on the producer's poll thread, and two per run (the ledger
        record, the done mark) were a GIL hand-off each between that thread and the event loop,
        which then waited for the GIL more than it ran (py-spy on a draining worker)."""
        if len(records) <= 2 or partition is None:
            self.produce_all(topic, records, partition, countdown.delivered, headers)
            return
        self.produce_all(topic, records[:1], partition, countdown.delivered, headers)
        self.produce_all(topic, records[1:-1], partition, None, headers)
        self.produce_all(topic, records[-1:], partition, countdown.delivered, headers)

    def acked_offsets(self, topic: TopicSpec,
                      by_partition: Mapping[int, Sequence[tuple[str, bytes | None]]]
                      ) -> asyncio.Future[list[Landed]]:
        """Produce records of ``topic`` already grouped by partition; the future resolves once
        the broker has acknowledged all of them, with where each partition's group landed, or
        fails with the first error. One wake of the event loop for the whole batch, as
        ``acked``; the executor's done marks need the offsets (``GuardedTable.write_acked``)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[Landed]] = loop.create_future()
        groups = {p: records for p, records in by_partition.items() if records}
        if not groups:
            done.set_result([])
            return done
        reported: list[Delivered] = []

        def report(error: Exception | None) -> None:
            loop.call_soon_threadsafe(_resolve, done, error, _landed(reported, groups))

        countdown = _Countdown(sum(_reports(r, p) for p, r in groups.items()), report, reported)
        for partition, records in groups.items():
            self._produce_reported(topic, records, partition, countdown)
        return done

    async def send(self, topic: TopicSpec, key: str, value: bytes | None,
                   partition: int | None = None,
                   headers: dict[str, str | bytes] | None = None) -> None:
        """Produce one record and wait until the broker has acknowledged it."""
        await self.acked(topic, [(key, value)], partition, headers)

    def flush(self, timeout_s: float = 30.0) -> int:
        """Block until queued records are acknowledged; returns how many are still in flight."""
        if self._made is None:
            return 0
        remaining: int = self._made.flush(timeout_s)
        return remaining

    def close(self) -> None:
        remaining = self.flush()
        if remaining:
            log.error("producer closed with %d undelivered records", remaining)
        self._closed.set()
        if self._poller is not None:
            self._poller.join(timeout=1)


class Outbox:
    """Records sent during one turn of the event loop go to the producer together, and every
    sender waits on the one future of that batch. Why: a spike's runs each end with a ledger
    record, and a future per record, woken from the delivery thread one by one, was a
    cross-thread wake per run; here a turn's runs share one. Create it inside its loop."""

    def __init__(self, emitter: Emitter) -> None:
        self.emitter = emitter
        self._records: dict[tuple[TopicSpec, int | None], list[tuple[str, bytes | None]]] = {}
        self._batch: asyncio.Future[None] | None = None

    def send(self, topic: TopicSpec, key: str, value: bytes | None,
             partition: int | None = None) -> asyncio.Future[None]:
        """Queue one record; the future resolves when the broker has acknowledged every record of
        its batch (or fails with the first error: then every sender of the batch retries)."""
        if self._batch is None:
            loop = asyncio.get_running_loop()
            self._batch = loop.create_future()
            loop.call_soon(self._flush)
        self._records.setdefault((topic, partition), []).append((key, value))
        return self._batch

    def _flush(self) -> None:
        batch, records = self._batch, self._records
        self._batch, self._records = None, {}
        if batch is None:
            return
        loop = asyncio.get_running_loop()
        countdown = _Countdown(sum(_reports(r, p) for (_, p), r in records.items()),
                               lambda error: loop.call_soon_threadsafe(_resolve, batch, error))
        for (topic, partition), queued in records.items():
            self.emitter._produce_reported(topic, queued, partition, countdown)  # noqa: SLF001


def _reports(records: Sequence[Any], partition: int | None) -> int:
    """Delivery reports a group of records asks for (``Emitter._produce_reported``). On one
    partition its first and last stand for all: an idempotent producer (every producer here)
    delivers a partition's records in order and without gaps, so the last one acknowledged
    means every one before it is, and a failure fails every one after it too (librdkafka's
    INTRODUCTION.md, "Idempotent Producer": ordering and gap-less guarantees). Records left to
    the partitioner may land anywhere: each reports."""
    return len(records) if partition is None or len(records) <= 2 else 2


def _landed(reported: list[Delivered], groups: Mapping[int, Sequence[Any]]) -> list[Landed]:
    """Where each partition's group landed: its first and last offset and its size (the first
    and last records are the ones that reported)."""
    offsets: dict[int, list[int]] = {}
    for partition, offset, _key in reported:
        offsets.setdefault(partition, []).append(offset)
    return [(p, min(found), max(found), len(groups[p])) for p, found in offsets.items()]


class _Countdown:
    """Counts a batch's deliveries down; reports once: at the first error, or when all are in.
    Delivery callbacks run on whichever thread polls or flushes the producer, hence the lock.
    ``landed``, when given, collects where each record landed."""

    def __init__(self, count: int, report: Callable[[Exception | None], None],
                 landed: list[Delivered] | None = None) -> None:
        self._left = count
        self._report: Callable[[Exception | None], None] | None = report
        self._lock = threading.Lock()
        self._landed = landed

    def delivered(self, err: KafkaError | None, msg: Message) -> None:
        with self._lock:
            if self._landed is not None and err is None:
                self._landed.append((msg.partition(), msg.offset(), msg.key()))
            self._left -= 1
            report = self._report
            if report is None or (err is None and self._left):
                return
            self._report = None
        report(None if err is None else KafkaException(err))


def _resolve(future: asyncio.Future[Any], error: Exception | None, result: Any = None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)
