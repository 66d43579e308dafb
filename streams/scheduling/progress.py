"""The scheduler's progress marks: a tiny state store backed by a compacted topic.

Separate from processing on purpose (the Quix Streams split of state and processing): the
scheduler asks "where did the previous owner of partition p stop?" once per assignment, and
records "every slot <= T of partition p is emitted" about once a second. Reading is a full scan
of a compacted topic with one key per partition, so it is small and fast.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from streams.runtime import admin, region
from streams.runtime.codec import codec
from streams.runtime.emit import Emitter
from streams.runtime.kafka_config import client_config
from streams.topology import FIRED, SCHEDULER_PROGRESS

log = logging.getLogger(__name__)
# the worker name of a mark a region promotion wrote: it replaces the partition's mark
REWOUND_BY = "region-promotion"


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
                marks[mark["partition"]] = next_mark(marks.get(mark["partition"]), mark)
            if msg.offset() + 1 >= pending.get(msg.partition(), 0):
                pending.pop(msg.partition(), None)
    finally:
        consumer.close()
    return marks


def next_mark(before: int | None, mark: dict[str, Any]) -> int:
    """A partition's mark after ``mark``, read in log order: a scheduler's marks only raise it
    (a late one of an older owner does not move it back); a region promotion's replaces it
    (``rewind_marks``)."""
    if mark["worker"] == REWOUND_BY or before is None:
        return int(mark["fired_through_ms"])
    return max(before, int(mark["fired_through_ms"]))


def rewind_marks(bootstrap: str, rewind_s: int = region.MARK_REWIND_S,
                 timeout_s: float = 10.0) -> dict[int, tuple[int, int]]:
    """An unplanned promotion's step in the promoted region's copy, before its workers start:
    each partition's mark moved back to before the last fired record that crossed, less
    ``rewind_s`` (``streams.runtime.region.rewound_mark``), since MirrorMaker copies the marks
    and the fired records in separate streams and a mark may have crossed without the records
    it vouches for. The scheduler then reads the fired tail from there: what crossed is left to
    its record, the rest decided by the job's misfire policy. Returns {partition: (was, now)}
    of the marks it moved."""
    marks = load_marks(bootstrap, timeout_s)
    last = last_fired_ms(bootstrap, sorted(marks), timeout_s)
    moved = {p: (m, region.rewound_mark(m, last.get(p), rewind_s)) for p, m in marks.items()}
    moved = {p: (was, now) for p, (was, now) in moved.items() if now != was}
    producer = Producer({**client_config(bootstrap), "acks": "all",
                         "partitioner": "murmur2_random"})  # where the scheduler's marks land
    for part, (_, now) in moved.items():
        producer.produce(SCHEDULER_PROGRESS.name, key=str(part), value=codec().encode(
            "SchedulerProgress", {"partition": part, "fired_through_ms": now, "epoch": 0,
                                  "worker": REWOUND_BY}))
    if producer.flush(timeout_s) > 0:
        raise TimeoutError(f"rewound marks not acknowledged within {timeout_s} s")
    return moved


def last_fired_ms(bootstrap: str, parts: list[int], timeout_s: float = 10.0) -> dict[int, int]:
    """The time (the record's timestamp) of each fired partition's last record, if any."""
    ends = admin.end_offsets(bootstrap, [(FIRED.name, p) for p in parts], timeout_s)
    consumer = Consumer({**client_config(bootstrap), "enable.auto.commit": False,
                         "group.id": f"cronstream-rewind-{uuid.uuid4()}"})
    found: dict[int, int] = {}
    try:
        for (_, part), end in ends.items():
            if end == 0:
                continue
            consumer.assign([TopicPartition(FIRED.name, part, end - 1)])
            msg = consumer.poll(timeout_s)
            if msg is None or msg.error():
                raise TimeoutError(f"reading the last record of {FIRED.name}[{part}] failed")
            found[part] = int(msg.timestamp()[1])
    finally:
        consumer.close()
    return found


def write_mark(emitter: Emitter, partition: int, fired_through_ms: int, epoch: int,
               worker: str) -> None:
    value = codec().encode("SchedulerProgress", {
        "partition": partition, "fired_through_ms": fired_through_ms,
        "epoch": epoch, "worker": worker,
    })
    emitter.produce(SCHEDULER_PROGRESS, str(partition), value)
