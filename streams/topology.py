"""Every topic, table and key of cronstream, declared once.

Read this module to draw the graph: the API produces commands to ``JOBS``; the scheduler agent
materialises them in the ``JOBS_TABLE`` (RocksDB, changelog-backed) and its punctuator emits due
slots to ``FIRED`` (key job id, so co-partitioned with jobs) plus decisions that need no execution
to ``LEDGER``; the executor agent consumes ``FIRED``, calls the target and writes the outcome to
``LEDGER`` (compacted, key = record id), which the Debezium JDBC sink upserts into Postgres.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


def partitions() -> int:
    """Partition count of the job-keyed topics; fixed for the life of a cluster (keys hash to it)."""
    return int(os.environ.get("CRONSTREAM_PARTITIONS", "8"))


@dataclass(frozen=True)
class TopicSpec:
    name: str
    key: str
    schema: str
    compacted: bool
    doc: str
    partitions: int = field(default_factory=partitions)

    def configs(self) -> dict[str, str]:
        if self.compacted:
            return {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"}
        return {"cleanup.policy": "delete", "retention.ms": str(7 * 24 * 3600 * 1000)}


@dataclass(frozen=True)
class TableSpec:
    name: str
    source: TopicSpec
    key: str
    doc: str

    def changelog(self, app_id: str) -> str:
        """faust's changelog topic name for this table (``<app id>-<table>-changelog``)."""
        return f"{app_id}-{self.name}-changelog"


JOBS = TopicSpec(
    name="cronstream.jobs", key="job_id", schema="Job", compacted=True,
    doc="Job definitions as accepted by the API; a tombstone deletes.",
)
FIRED = TopicSpec(
    name="cronstream.fired", key="job_id", schema="Fired", compacted=False,
    doc="Due slots to execute, fire id job_id@nominal_time.",
)
LEDGER = TopicSpec(
    name="cronstream.ledger", key="record_id", schema="LedgerEntry", compacted=True,
    doc="One decision/outcome per slot; sunk into Postgres.",
)
SCHEDULER_PROGRESS = TopicSpec(
    name="cronstream.scheduler-progress", key="partition", schema="SchedulerProgress",
    compacted=True, doc="Per-partition 'fired through' marks of the scheduler.",
)

TOPICS: tuple[TopicSpec, ...] = (JOBS, FIRED, LEDGER, SCHEDULER_PROGRESS)

JOBS_TABLE = TableSpec(
    name="jobs", source=JOBS, key="job_id",
    doc="Current definition of every job of the worker's partitions (raw Avro bytes).",
)
FIRE_OUTCOMES_TABLE = TableSpec(
    name="fire-outcomes", source=FIRED, key="fire_id",
    doc="Fire ids the executor has finished, so a replayed fired record is not run again.",
)

TABLES: tuple[TableSpec, ...] = (JOBS_TABLE, FIRE_OUTCOMES_TABLE)

APP_ID = "cronstream"
LEDGER_SINK_TABLE = "ledger"
