"""The scheduler's progress marks: a tiny state store backed by a compacted topic.

Separate from processing on purpose (the Quix Streams split of state and processing): the
scheduler asks "where did the previous owner of partition p stop?" once per assignment, and
records "every slot <= T of partition p is emitted" about once a second. Reading is a full scan
of a compacted topic with one key per partition, so it is small and fast.
"""

from __future__ import annotations

import logging
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from streams.runtime.codec import codec
from streams.runtime.emit import Emitter
from streams.runtime.kafka_config import client_config
from streams.topology import SCHEDULER_PROGRESS

log = logging.getLogger(__name__)


def load_marks(bootstrap: str, timeout_s: float = 10.0) -> dict[int, int]:
    """Latest ``fired_through_ms`` per jobs partition (absent: the partition never fired)."""
    consumer = Consumer({
        **client_config(bootstrap),
        "group.id": f"cronstream-progress-reader-{uuid.uuid4()}",
        "enable.auto.commit": False,
    })
    marks: dict[int, int] = {}
    try:
        meta = consumer.list_topics(SCHEDULER_PROGRESS.name, timeout=timeout_s)
        parts = meta.topics[SCHEDULER_PROGRESS.name].partitions
        pending = {}
        for p in parts:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(SCHEDULER_PROGRESS.name, p), timeout=timeout_s)
            if high > low:
                pending[p] = high
        consumer.assign([TopicPartition(SCHEDULER_PROGRESS.name, p, OFFSET_BEGINNING)
                         for p in pending])
        while pending:
            msg = consumer.poll(timeout_s)
            if msg is None:
                raise TimeoutError(f"reading {SCHEDULER_PROGRESS.name} stalled")
            if msg.error():
                raise RuntimeError(f"reading {SCHEDULER_PROGRESS.name}: {msg.error()}")
            if msg.value() is not None:
                mark = codec().decode(msg.value())
                part = mark["partition"]
                marks[part] = max(marks.get(part, 0), mark["fired_through_ms"])
            if msg.offset() + 1 >= pending.get(msg.partition(), 0):
                pending.pop(msg.partition(), None)
    finally:
        consumer.close()
    return marks


def write_mark(emitter: Emitter, partition: int, fired_through_ms: int, epoch: int,
               worker: str) -> None:
    value = codec().encode("SchedulerProgress", {
        "partition": partition, "fired_through_ms": fired_through_ms,
        "epoch": epoch, "worker": worker,
    })
    emitter.produce(SCHEDULER_PROGRESS, str(partition), value)
