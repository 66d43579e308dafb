"""Replication lag between the active region's cluster and the standby's (docs/regions.md).

MirrorMaker 2's source connector commits, in the standby's cluster, the source offset of the last
record it copied of each partition (``streams.topology.mirror_offsets_topic``: JSON, Kafka
Connect's source-offset format). The lag of a partition is the active cluster's end offset minus
the offset after that one, and in seconds the age of the oldest record not copied (its
timestamp in the active cluster): the same shape as consumer lag (``ops.lag``), and the RPO of
an unplanned promotion at that moment. It overstates by at most the connector's commit period
(one second).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from ops import lag as lag_
from streams.runtime.admin import end_offsets
from streams.runtime.kafka_config import client_config
from streams.topology import mirror_offsets_topic, mirrored_topics


@dataclass(frozen=True)
class ReplicationLag:
    topic: str
    partition: int
    end: int  # the active cluster's end offset
    copied: int  # the offset after the last record copied (0: none)
    lag: int
    time_lag_s: float | None  # age of the oldest record not copied; 0 when caught up

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def copied_through(records: list[tuple[bytes | None, bytes | None]], source: str
                   ) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the offset after the last copied record, from the connector's
    offset records in log order (key ``["MirrorSourceConnector", {"cluster", "topic",
    "partition"}]``, value ``{"offset": n}``; a later record of a key wins, a null value
    deletes it). Records of another source cluster or connector are not ours."""
    copied: dict[tuple[str, int], int] = {}
    for key, value in records:
        if key is None:
            continue
        try:
            connector, where = json.loads(key)
        except (ValueError, TypeError):
            continue
        if connector != "MirrorSourceConnector" or where.get("cluster") != source:
            continue
        tp = (str(where["topic"]), int(where["partition"]))
        if value is None:
            copied.pop(tp, None)
        else:
            copied[tp] = int(json.loads(value)["offset"]) + 1
    return copied


def lag_rows(ends: dict[tuple[str, int], int], copied: dict[tuple[str, int], int],
             stamps: dict[tuple[str, int, int], int], now_ms: int) -> list[ReplicationLag]:
    """One row per partition of ``ends``, its lag against ``copied`` and the age of the record
    at the copied offset (``stamps``) when it lags."""
    rows = []
    for (topic, part), end in sorted(ends.items()):
        done = copied.get((topic, part), 0)
        lag = lag_.offset_lag(done, end)
        rows.append(ReplicationLag(topic, part, end, done, lag or 0,
                                   lag_.record_age_s(stamps.get((topic, part, done)), lag, now_ms)))
    return rows


def read(source_bootstrap: str, standby_bootstrap: str, source: str = "a",
         timeout_s: float = 10.0) -> list[ReplicationLag]:
    """The lag of every partition MirrorMaker copies from ``source`` (the active region)."""
    topics = mirrored_topics()
    ends = end_offsets(source_bootstrap, _partitions(source_bootstrap, topics, timeout_s),
                       timeout_s)
    copied = copied_through(_offset_records(standby_bootstrap, mirror_offsets_topic(source),
                                            timeout_s), source)
    pending = {(t, p, copied.get((t, p), 0)) for (t, p), end in ends.items()
               if end > copied.get((t, p), 0)}
    stamps = lag_.timestamps(source_bootstrap, pending, timeout_s)
    return lag_rows(ends, copied, stamps, int(time.time() * 1000))


def summary(rows: list[ReplicationLag]) -> tuple[int, float | None]:
    """Records not copied in all, and the oldest's age (None while some age is unknown)."""
    ages = [r.time_lag_s for r in rows]
    return sum(r.lag for r in rows), None if None in ages else max(ages, default=0.0)


def table(rows: list[ReplicationLag]) -> str:
    """Only the partitions that lag, then the total."""
    header = ("TOPIC", "PARTITION", "END-OFFSET", "COPIED", "LAG", "TIME-LAG-S")
    body = [(r.topic, str(r.partition), str(r.end), str(r.copied), str(r.lag),
             "-" if r.time_lag_s is None else f"{r.time_lag_s:.1f}") for r in rows if r.lag]
    records, age = summary(rows)
    total = f"replication lag: {records} records over {len(rows)} partitions, oldest " + (
        "unknown" if age is None else f"{age:.1f} s")
    if not body:
        return total
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in [header, *body]]
    return "\n".join([*lines, total])


def _partitions(bootstrap: str, topics: list[str], timeout_s: float) -> list[tuple[str, int]]:
    consumer = Consumer({**client_config(bootstrap), "group.id": f"cronstream-lag-{uuid.uuid4()}"})
    try:
        meta = consumer.list_topics(timeout=timeout_s).topics
        return [(t, p) for t in topics if t in meta for p in meta[t].partitions]
    finally:
        consumer.close()


def _offset_records(bootstrap: str, topic: str, timeout_s: float
                    ) -> list[tuple[bytes | None, bytes | None]]:
    """Every record of the connector's offsets topic (small, compacted), read to its end."""
    consumer = Consumer({**client_config(bootstrap), "group.id": f"cronstream-lag-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    records: list[tuple[bytes | None, bytes | None]] = []
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None:
            return []
        parts = list(meta.partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        ended: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(ended) < len(parts):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} stalled")
            for msg in consumer.consume(1000, 0.5):
                if msg.error():
                    ended.add(msg.partition())
                else:
                    records.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return records
