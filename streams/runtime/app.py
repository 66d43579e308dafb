"""The faust application a cronstream worker runs, built on demand (importing this does nothing).

``streams.worker`` (the composition root) calls :func:`build` once and hands the resulting
:class:`Runtime` to each sub-topology's ``register`` (``streams.scheduling.agents``,
``streams.execution.executor``, ``streams.campaigns.fanout``, ``streams.runtime.commit_watch``).
State lives in RocksDB (``rocksdb://``, the rocksdict driver) under the worker's own data dir,
backed by changelog topics, so a worker that takes over a partition restores it from Kafka.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faust

from streams.runtime import committed_seek, coordinator_lookup, library_patch, rebootstrap
from streams.runtime.authority import Lease, NoRegion
from streams.runtime.group_lease import GroupLease, Member, heartbeats_renew
from streams.runtime.guarded_table import GuardedTable
from streams.runtime.metrics import WorkerHealth
from streams.runtime.settings import Settings
from streams.runtime.standbys import StandbyAssignor
from streams.topology import APP_ID, TableSpec, TopicSpec


@dataclass
class Runtime:
    """One worker's faust app and what every agent of it shares: its settings, its id and its
    health (``/healthz``, ``/readyz``: ``streams.runtime.metrics``)."""

    app: Any  # faust.App
    settings: Settings
    worker_id: str
    health: WorkerHealth = field(default_factory=WorkerHealth)
    # may this worker's region send now, under which epoch (streams.runtime.authority): every
    # send, run and decision asks it; one region: always, under epoch 0
    region: Lease = field(default_factory=NoRegion)
    # this member's standing in the workers' group, from its heartbeats (streams.runtime.group_lease):
    # the fan-out's send fence asks it before it asks the coordinator; None: always ask
    group_lease: GroupLease | None = None

    def topic(self, spec: TopicSpec) -> Any:
        """A faust topic of ``streams.topology``: bytes in, bytes out (``streams.runtime.codec``
        decodes)."""
        return self.app.topic(spec.name, key_serializer="raw", value_serializer="raw",
                              partitions=spec.count(self.settings.partitions))

    def table(self, spec: TableSpec, rank: Mapping[bytes, int] | None = None) -> Any:
        """A RocksDB table of ``streams.topology``, partitioned like its source topic, whose
        recovery a zombie's late writes cannot fool (``streams.runtime.guarded_table``); ``rank`` orders
        the values of a table that is a state machine, so recovery never moves a key backwards."""
        app = self.app
        return app.tables.add(GuardedTable(app, name=spec.name, key_type=bytes, value_type=bytes,
                                           beacon=app.tables.beacon,
                                           partitions=spec.source.count(self.settings.partitions),
                                           help=spec.doc,
                                           rank=rank))

    def member(self, generation: int) -> Member:
        """This process's member id in the workers' group now, in ``generation`` (the one a
        record was fetched in). A fan-out walker keeps the one it was started under: the
        coordinator's answer to "who holds partition p" names members, and a worker that
        rejoins after its session expired (a zombie) is a new member, so its old walkers are
        told they own nothing (``streams.campaigns.ownership``); the group lease goes by
        generation too (``streams.runtime.group_lease``)."""
        consumer = self.app.consumer._thread._ensure_consumer()  # noqa: SLF001
        member_id: str = consumer._coordinator.member_id  # noqa: SLF001
        return Member(member_id, generation)

    def ready_file(self) -> Path:
        """Touched after each completed recovery, so ``stack up`` knows the worker can fire."""
        return self.settings.run_dir / f"{self.worker_id}.ready"


PRODUCER_BUFFER_MESSAGES = 10_000  # table writes waiting for faust's changelog producer


def idempotent_producers() -> None:
    """Make faust's producers idempotent, not only inside transactions (faust 0.15 sets
    ``enable_idempotence`` only there): a changelog write retried after a lost answer must not
    land twice. aiokafka takes it with ``acks=-1`` (``producer_acks`` below). Idempotent."""
    from faust.transport.drivers.aiokafka import Producer

    if getattr(Producer, "_cronstream_idempotent", False):
        return
    extra = Producer._settings_extra  # noqa: SLF001

    def settings_extra(self: Producer) -> Mapping[str, Any]:
        return {"enable_idempotence": True, **extra(self)}

    Producer._settings_extra = settings_extra  # type: ignore[method-assign]  # noqa: SLF001
    Producer._cronstream_idempotent = True  # type: ignore[attr-defined]  # noqa: SLF001


FETCH_MAX_WAIT_MS = 500  # Kafka's and aiokafka's default; faust's worker consumer says 1500


def shorter_fetch_polls() -> None:
    """Give faust's worker consumer Kafka's default fetch wait, 500 ms (idempotent).

    faust hardcodes ``fetch_max_wait_ms=1500`` for it (faust-streaming 0.15.3; robinhood/faust#281
    asks for a setting). A broker answers one request of a connection at a time, and aiokafka
    sends its metadata refreshes over the same connection as its fetches, so after a leader
    moved each refresh waited behind an idle poll of up to 1.5 s before the consumer knew where
    to fetch (issue 42, item 2). A shorter poll costs only more empty fetches while idle: a fetch
    returns as soon as a record is there."""
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    create = library_patch.original(AIOKafkaConsumerThread, "_create_worker_consumer")

    def create_worker_consumer(self: AIOKafkaConsumerThread, transport: Any) -> Any:
        consumer = create(self, transport)
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS  # noqa: SLF001 - read at its start()
        return consumer

    library_patch.replace(AIOKafkaConsumerThread, "_create_worker_consumer",
                          create_worker_consumer)


def revocations_without_collections() -> None:
    """Drop faust's full garbage collection from every table's rebalance. Idempotent.

    faust-streaming 0.15.3's RocksDB store ends ``revoke_partitions`` with ``gc.collect()``
    (faust/stores/rocksdb.py; no upstream issue found, 2026-11-30), and faust calls it for
    every table at every rebalance, whether the table lost a partition or not: eight full
    collections of the worker's whole unfrozen heap per rebalance. With 10M jobs indexed each
    took ≈ 200 ms, so a rebalance held the GIL, the consumer thread's heartbeats with it, for
    longer than the 2 s session (``settings.group_session``): the member was expelled, which
    began another rebalance, and its collections another (``bench.scale --jobs 10000000
    --workers 2``: 103 of them in a few seconds, both workers taken out of the group in turn).
    What the collections were for, closing a dropped partition's RocksDB, reference counting
    does when faust pops it; a DB a cycle still held would be closed by the scheduler's one
    collection at each recovery, just before its rebuild (``streams.scheduling.agents``), and
    faust's open retries a DB whose lock is still held."""
    from faust.stores.rocksdb import Store

    if getattr(Store, "_cronstream_no_collections", False):
        return

    def revoke_partitions(self: Store, table: Any, tps: Any) -> None:
        for tp in tps:
            if tp.topic in table.changelog_topic.topics \
                    and self._dbs.pop(tp.partition, None) is not None:  # noqa: SLF001
                self.logger.info(f"closing db {tp.topic} partition {tp.partition}")

    Store.revoke_partitions = revoke_partitions  # type: ignore[method-assign]
    Store._cronstream_no_collections = True  # type: ignore[attr-defined]  # noqa: SLF001


def build(settings: Settings, worker_id: str, *, replication_factor: int) -> Runtime:
    """The worker's faust app, with the workarounds it needs installed first. Building it
    contacts no broker; ``replication_factor`` is the cluster's (``admin.replication``), given
    to faust for the topics it declares itself (its leader topic): the changelogs were created
    by ``admin.ensure_topics``, with the minimum ISR too."""
    committed_seek.install()
    coordinator_lookup.install()
    rebootstrap.install()
    idempotent_producers()
    shorter_fetch_polls()
    revocations_without_collections()
    # the consumer's client id, unique per process (the fan-out fence goes by member id)
    client_id = f"cronstream-{worker_id}-{uuid.uuid4().hex[:8]}"
    session_s, heartbeat_s = settings.group_session
    app = faust.App(
        APP_ID,
        broker=[f"kafka://{host}" for host in settings.bootstrap.split(",")],
        broker_client_id=client_id,
        store="rocksdb://",
        datadir=str(settings.home / "workers" / worker_id),
        topic_partitions=settings.partitions,
        topic_replication_factor=replication_factor,
        **settings.kafka_security.faust(),  # TLS/SASL (CRONSTREAM_KAFKA_*), nothing on PLAINTEXT
        consumer_auto_offset_reset="earliest",
        broker_commit_every=1000,
        broker_commit_interval=1.0,
        web_enabled=False,
        web_host="127.0.0.1",
        web_port=settings.worker_web_port,  # faust binds it even when disabled; one per worker
        # Standby replicas (CRONSTREAM_STANDBY_REPLICAS, 1 by default): every worker keeps the
        # others' partitions as standbys, tables and due indexes (streams.scheduling.warm_index),
        # so a takeover of a million jobs fires within seconds instead of recovering and
        # re-reading them all (89 s). Only for the tables streams.topology marks standby
        # (docs/performance.md); 0 turns them off.
        table_standby_replicas=settings.standby_replicas,
        PartitionAssignor=StandbyAssignor,  # standbys only for the tables topology marks standby
        stream_wait_empty=False,
        producer_acks=-1,
        # the changelogs' producer (aiokafka) batches for 5 ms: sent as they came, a spike's
        # done marks cost a produce request each (a sixth of a draining worker's event loop)
        producer_linger=0.005,
        # a dead worker's partitions move once its session ends (settings.group_session)
        broker_session_timeout=session_s,
        broker_heartbeat_interval=heartbeat_s,
    )
    # faust stops handing ANY record to ANY agent while more than ``max_messages`` (100) table
    # writes wait for its changelog producer (``ProducerBuffer.wait_until_ebb``, called for every
    # message the conductor delivers), and sends them one await at a time: at a spike's thousand
    # done marks a second the fired topic was read at the pace of those sends and the executor
    # sat idle with its queue empty. The workaround from faust-streaming/faust#173 (open):
    # a deeper buffer, still bounded.
    app.producer.buffer.max_messages = PRODUCER_BUFFER_MESSAGES
    lease = GroupLease(APP_ID, session_s, app.conf.broker_rebalance_timeout)
    heartbeats_renew(lease)
    return Runtime(app, settings, worker_id, group_lease=lease)
