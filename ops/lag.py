"""Consumer lag read from Kafka's own offsets, the way Burrow and ``kafka-consumer-groups`` do.

Per group, topic and partition: the group's committed offset, the partition's end offset, their
difference, and the *time* lag, the age of the oldest record the group has not processed (the
timestamp of the record at the committed offset). Offsets come from the broker, not from the
workers, so a stuck or dead worker shows up as growing lag rather than as silence.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from streams.runtime.admin import client as admin_client
from streams.runtime.admin import committed_offsets, end_offsets
from streams.runtime.kafka_config import client_config

# consumers that never commit: the API's and workers' topic views, fan-out walkers
EPHEMERAL_PREFIXES = ("cronstream-view-", "fanout-", "cronstream-lag-")


@dataclass(frozen=True)
class PartitionLag:
    group: str
    topic: str
    partition: int
    committed: int | None  # None: the group holds the partition but has committed nothing
    end: int
    lag: int | None
    time_lag_s: float | None  # age of the oldest unprocessed record; 0 when caught up
    consumer_id: str | None
    host: str | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def offset_lag(committed: int | None, end: int) -> int | None:
    """``kafka-consumer-groups``' LAG: end minus committed, unknown ('-') without a commit."""
    return None if committed is None else max(0, end - committed)


def record_age_s(oldest_unprocessed_ts_ms: int | None, lag: int | None, now_ms: int) -> float | None:
    """Time lag: 0 when caught up, the oldest unprocessed record's age otherwise."""
    if lag == 0:
        return 0.0
    if oldest_unprocessed_ts_ms is None or oldest_unprocessed_ts_ms < 0:
        return None
    return max(0.0, (now_ms - oldest_unprocessed_ts_ms) / 1000)


def run_backlog(rows: list[PartitionLag], group: str, fired_topic: str) -> dict[str, Any]:
    """The workers' run backlog as the broker sees it: fired records their group has not
    committed, and the age of the oldest. The executor commits a fired record only once its
    slot is resolved (run, or expired with the reason), so this counts the slots read ahead and
    waiting, running, and not yet read; each worker's ``cronstream_run_backlog_*`` gauges give
    its own share. ``oldest_age_s`` is None while a partition's age is unknown."""
    mine = [r for r in rows if r.group == group and r.topic == fired_topic]
    ages = [r.time_lag_s for r in mine]
    return {"slots": sum(r.lag or 0 for r in mine),
            "oldest_age_s": None if any(a is None for a in ages) else max(ages, default=0.0),
            "partitions": len(mine)}


def groups(admin: AdminClient, timeout_s: float = 10.0) -> list[str]:
    """Every group with committed offsets or members (those without members included: the
    executor's ``cronstream-executor`` has none), ephemeral ones left out. A broker that could
    not answer raises its error: a partial list would read as groups gone."""
    listed = admin.list_consumer_groups(request_timeout=timeout_s).result()
    if listed.errors:  # KafkaExceptions, one a broker
        raise listed.errors[0]
    return sorted(g.group_id for g in listed.valid
                  if not g.group_id.startswith(EPHEMERAL_PREFIXES))


def read(bootstrap: str, only: list[str] | None = None, timeout_s: float = 10.0
         ) -> list[PartitionLag]:
    """Lag of every partition of ``only`` (default: every non-ephemeral group)."""
    admin = admin_client(bootstrap)
    names = only or groups(admin, timeout_s)
    if not names:
        return []
    owners = _owners(admin, names, timeout_s)
    committed: dict[tuple[str, str, int], int | None] = {}
    for name in names:
        for (topic, part), offset in committed_offsets(bootstrap, name, timeout_s).items():
            committed[(name, topic, part)] = offset
    for (name, topic, part) in owners:
        committed.setdefault((name, topic, part), None)
    tps = {(t, p) for (_, t, p) in committed}
    ends = end_offsets(bootstrap, tps, timeout_s)
    pending = {(t, p, c) for (_, t, p), c in committed.items()
               if c is not None and ends[(t, p)] > c}
    stamps = timestamps(bootstrap, pending, timeout_s)
    now = int(time.time() * 1000)
    rows = []
    for (name, topic, part), offset in sorted(committed.items()):
        end = ends[(topic, part)]
        lag = offset_lag(offset, end)
        owner = owners.get((name, topic, part), (None, None))
        rows.append(PartitionLag(name, topic, part, offset, end, lag,
                                 record_age_s(stamps.get((topic, part, offset)), lag, now),
                                 owner[0], owner[1]))
    return rows


def _owners(admin: AdminClient, names: list[str], timeout_s: float
            ) -> dict[tuple[str, str, int], tuple[str, str]]:
    out: dict[tuple[str, str, int], tuple[str, str]] = {}
    for name, future in admin.describe_consumer_groups(names, request_timeout=timeout_s).items():
        try:
            described = future.result()
        except KafkaException:
            continue
        for member in described.members:
            for tp in member.assignment.topic_partitions if member.assignment else []:
                out[(name, tp.topic, tp.partition)] = (member.member_id, member.host)
    return out


def timestamps(bootstrap: str, pending: set[tuple[str, int, int]], timeout_s: float
                ) -> dict[tuple[str, int, int], int]:
    """Timestamp of the record at each (topic, partition, committed offset)."""
    if not pending:
        return {}
    consumer = Consumer({**client_config(bootstrap), "group.id": f"cronstream-lag-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    wanted = {(t, p): o for t, p, o in pending}
    consumer.assign([TopicPartition(t, p, o) for (t, p), o in wanted.items()])
    found: dict[tuple[str, int, int], int] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while wanted and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            key = (msg.topic(), msg.partition())
            if key not in wanted:
                continue
            if msg.error() is None:
                found[(msg.topic(), msg.partition(), wanted[key])] = msg.timestamp()[1]
            # first record (or end) of this partition seen: stop reading it
            consumer.incremental_unassign([TopicPartition(*key)])
            del wanted[key]
    finally:
        consumer.close()
    return found


def table(rows: list[PartitionLag]) -> str:
    """The layout of ``kafka-consumer-groups --describe``, plus TIME-LAG."""
    header = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
              "TIME-LAG-S", "CONSUMER-ID")
    body = [(r.group, r.topic, str(r.partition), _dash(r.committed), str(r.end), _dash(r.lag),
             "-" if r.time_lag_s is None else f"{r.time_lag_s:.1f}", r.consumer_id or "-")
            for r in rows]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                     for row in [header, *body])


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)
