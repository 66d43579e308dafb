"""The faust application every cronstream worker runs.

Agents register themselves on the app (``streams.scheduling.scheduler``,
``streams.execution.executor``, ``streams.campaigns.fanout``); ``streams.worker`` wires them and hands
control to faust's worker. State lives in RocksDB (``rocksdb://``, the
rocksdict driver) under the worker's own data dir, backed by changelog topics, so a worker that
takes over a partition restores it from Kafka.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import faust

from streams.runtime import committed_seek, settings
from streams.runtime.metrics import WorkerHealth
from streams.runtime.standbys import StandbyAssignor
from streams.runtime.state import GuardedTable
from streams.topology import APP_ID, TableSpec, TopicSpec

committed_seek.install()
SETTINGS = settings.load()
WORKER_ID = os.environ.get("CRONSTREAM_WORKER_ID") or f"{socket.gethostname()}-{os.getpid()}"
# the consumer's client id, unique per process (the fan-out fence goes by member id, member_id())
CLIENT_ID = f"cronstream-{WORKER_ID}-{uuid.uuid4().hex[:8]}"
HEALTH = WorkerHealth()  # /healthz and /readyz of this worker (streams.runtime.metrics)

app = faust.App(
    APP_ID,
    broker=f"kafka://{SETTINGS.bootstrap}",
    broker_client_id=CLIENT_ID,
    store="rocksdb://",
    datadir=str(SETTINGS.home / "workers" / WORKER_ID),
    topic_partitions=int(os.environ.get("CRONSTREAM_PARTITIONS", "8")),
    topic_replication_factor=1,
    consumer_auto_offset_reset="earliest",
    broker_commit_every=1000,
    broker_commit_interval=1.0,
    web_enabled=False,
    web_host="127.0.0.1",
    web_port=SETTINGS.worker_web_port,  # faust binds it even when disabled; one per worker
    # Standby replicas (CRONSTREAM_STANDBY_REPLICAS, 1 by default): every worker keeps the others'
    # partitions as standbys, tables and due indexes (streams.scheduling.warm_index), so a takeover of a
    # million jobs fires within seconds instead of recovering and re-reading them all (89 s).
    # Only for the tables streams.topology marks standby (docs/performance.md); 0 turns them off.
    table_standby_replicas=int(os.environ.get("CRONSTREAM_STANDBY_REPLICAS", "1")),
    PartitionAssignor=StandbyAssignor,  # standbys only for the tables topology marks standby
    stream_wait_empty=False,
    producer_acks=-1,
    # a dead worker's partitions move after ~10 s instead of faust's default 60 s
    broker_session_timeout=10.0,
    broker_heartbeat_interval=2.0,
)


def raw_topic(spec: TopicSpec) -> Any:
    """A faust topic of ``streams.topology``: bytes in, bytes out (``streams.runtime.codec`` decodes)."""
    return app.topic(spec.name, key_serializer="raw", value_serializer="raw",
                     partitions=spec.partitions)


def raw_table(spec: TableSpec, rank: Mapping[bytes, int] | None = None) -> Any:
    """A RocksDB table of ``streams.topology``, partitioned like its source topic, whose
    recovery a zombie's late writes cannot fool (``streams.runtime.state``); ``rank`` orders the values
    of a table that is a state machine, so recovery never moves a key backwards."""
    return app.tables.add(GuardedTable(app, name=spec.name, key_type=bytes, value_type=bytes,
                                       beacon=app.tables.beacon, partitions=spec.source.partitions,
                                       help=spec.doc, rank=rank))


def member_id() -> str:
    """This process's member id in the workers' group now. A fan-out walker keeps the one it was
    started under: the coordinator's answer to "who holds partition p" names members, and a
    worker that rejoins after its session expired (a zombie) is a new member, so its old walkers
    are told they own nothing (``streams.campaigns.ownership``)."""
    member: str = app.consumer._thread._ensure_consumer()._coordinator.member_id  # noqa: SLF001
    return member


def ready_file(worker_id: str) -> Path:
    """Touched after each completed recovery, so ``stack up`` knows the worker can fire."""
    return SETTINGS.run_dir / f"{worker_id}.ready"
