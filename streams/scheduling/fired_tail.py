"""What a partition's previous owner fired after its last fired-through mark, read from the
fired topic's tail when the partition is taken, so that the new owner does not fire it again.

Why: the mark is written about once a second. A worker killed 250 ms into a top-of-minute spike
had fired 26,000 slots past its last mark, and its survivor, resuming from the mark, fired them
all again, as missed slots in turns (``streams.scheduling.catch_up``), before the 24,000 the victim never
reached: for 28 s every turn went to a slot already on the topic, and every such record was one
more for the executor to take up and drop (``bench.failover --spike``). Those records are
decided slots: the executor, which reads the same partitions, runs them. A slot found here is
still expected by the reconciler, from the record's time, so one whose record is lost or fenced
off (a zombie's, ``streams.runtime.fencing``) is re-driven.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaException, TopicPartition

from streams.runtime.codec import codec
from streams.runtime.fencing import EpochFence
from streams.runtime.kafka_config import client_config
from streams.topology import FIRED

Record = tuple[int, str, int, int]  # partition, fire id, epoch, fired_ms
BATCH_WAIT_S = 0.05
ATTEMPTS = 3  # read's tries, each on a new client, sharing its timeout

log = logging.getLogger(__name__)


def previous_fires(records: Iterable[Record]) -> dict[int, dict[str, int]]:
    """Per partition, fire id -> fired_ms of its first record, of ``records`` in log order that
    the executor admits (an older epoch after a newer one is a zombie's: it is fenced off)."""
    fence = EpochFence()
    fires: dict[int, dict[str, int]] = {}
    for part, fid, epoch, fired_ms in records:
        if fence.admit(part, epoch):
            fires.setdefault(part, {}).setdefault(fid, fired_ms)
    return fires


def read(bootstrap: str, marks: dict[int, int], timeout_s: float = 10.0,
         topic: str = FIRED.name) -> dict[int, dict[str, int]]:
    """``previous_fires`` of each partition's records written at or after its mark (``marks``:
    partition -> fired-through ms). A partition without a mark is not read: an owner that died
    before its first mark leaves its slots to be fired again (the executor runs a fire id once).

    A slot falls due after the mark and the scheduler fires it no sooner, and a fired record's
    timestamp is its CreateTime, stamped by the producer on the same clock: the records before
    the first at the mark's time are not read. (A trigger or a backfill fires a slot at another
    time; one read here is left to its record, one not read is fired again: both are safe.)

    Read in up to ``ATTEMPTS`` tries of ``timeout_s / ATTEMPTS`` each, each on a new client: the
    read runs in a recovery, often right after a node came back, and a client whose view of
    that node was stale waited out the whole 10 s while a new one answered at once (three
    nodes, rolling restart: "scheduler took partitions … in 10.13s", issue 42 item 2)."""
    since = {p: mark for p, mark in marks.items() if mark > 0}
    if not since:
        return {}
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return previous_fires(_read_once(bootstrap, since, timeout_s / ATTEMPTS, topic))
        except (KafkaException, RuntimeError, TimeoutError) as exc:
            if attempt == ATTEMPTS:
                raise
            log.warning("reading %s partitions %s since their marks failed (%s); trying again "
                        "on a new client (%d of %d)", topic, sorted(since), exc, attempt + 1,
                        ATTEMPTS)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _read_once(bootstrap: str, since: dict[int, int], timeout_s: float,
               topic: str) -> list[Record]:
    """One try of ``read``, on a consumer of its own; its watermarks too, on its fresh view of
    the cluster. Its lookups share ``timeout_s``; the read after them stalls after
    ``timeout_s`` without a batch (a long tail may take longer as a whole)."""
    consumer = Consumer({**client_config(bootstrap), "enable.auto.commit": False,
                         "group.id": f"cronstream-fired-tail-{uuid.uuid4()}"})
    records: list[Record] = []
    asked_by = time.monotonic() + timeout_s  # one deadline for every lookup of this try

    def left() -> float:
        remaining = asked_by - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"{topic} partitions {sorted(since)}: offsets not known in "
                               f"{timeout_s:.1f}s")
        return remaining

    try:
        starts = consumer.offsets_for_times(
            [TopicPartition(topic, p, mark) for p, mark in since.items()], timeout=left())
        for tp in starts:
            if tp.error is not None:
                raise RuntimeError(f"{topic} partition {tp.partition}: {tp.error}")
        ends: dict[int, int] = {}
        for tp in starts:
            if tp.offset < 0:  # nothing since the mark
                continue
            high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition),
                                                  timeout=left(), cached=False)[1]
            if tp.offset < high:
                ends[tp.partition] = high
        consumer.assign([tp for tp in starts if tp.partition in ends])
        stalls_at = time.monotonic() + timeout_s
        while ends:
            # a short wait: librdkafka returns a batch once it is full or the wait is over, and
            # a takeover waited out the whole timeout for the last, short batch (10 s)
            batch = consumer.consume(10_000, BATCH_WAIT_S)
            if not batch:
                if time.monotonic() > stalls_at:
                    raise TimeoutError(f"reading {topic} partitions {sorted(ends)} stalled")
                continue
            stalls_at = time.monotonic() + timeout_s
            for msg in batch:
                if msg.error():
                    raise RuntimeError(f"reading {topic}: {msg.error()}")
                end = ends.get(msg.partition(), 0)
                if msg.offset() < end and msg.value() is not None:
                    fired = codec().decode(msg.value())
                    records.append((msg.partition(), fired["fire_id"], fired["epoch"],
                                    fired["fired_ms"]))
                if msg.offset() + 1 >= end:
                    ends.pop(msg.partition(), None)
    finally:
        consumer.close()
    return records
