"""MirrorMaker 2 from the active region's cluster to the standby's (docs/regions.md,
"Replication"): a dedicated ``org.apache.kafka.connect.mirror.MirrorMaker`` from the stack's
Kafka jars (``org.apache.kafka:connect-mirror``, ``stack/pom.xml``), run in the standby region so
it only reads from the active one.

What it copies: cronstream's topics and the workers' changelogs under the same names
(``IdentityReplicationPolicy``: the promoted region's workers, API and sinks run unchanged, one
direction at a time), and the offsets of the groups that read them, translated every second.
Its own bookkeeping (offset syncs, checkpoints, the source connector's committed offsets in
``streams.topology.mirror_offsets_topic``) lives in the standby's cluster: ``ops.replication``
reads the lag from there.
"""

from __future__ import annotations

from streams.topology import MIRROR_GROUPS, MIRROR_TOPICS

SYNC_S = 1  # checkpoints and group offsets translated this often


def properties(source: str, target: str, source_bootstrap: str, target_bootstrap: str,
               source_client: list[str], target_client: list[str], factor: int = 1) -> str:
    """``mm2.properties`` for one flow ``source -> target`` (the reverse disabled: identity
    names cannot tell a loop). ``*_client``: each cluster's client security properties
    (``streams.runtime.kafka_config.KafkaSecurity.java_properties``, unprefixed)."""
    flow = f"{source}->{target}"
    lines = [
        f"clusters = {source}, {target}",
        f"{source}.bootstrap.servers = {source_bootstrap}",
        f"{target}.bootstrap.servers = {target_bootstrap}",
        *[f"{source}.{line}" for line in source_client],
        *[f"{target}.{line}" for line in target_client],
        f"{flow}.enabled = true",
        f"{target}->{source}.enabled = false",
        # a properties file reads a backslash as an escape: doubled, the regexes arrive whole
        f"{flow}.topics = {_escaped(MIRROR_TOPICS)}",
        f"{flow}.groups = {_escaped(MIRROR_GROUPS)}",
        "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        # the standby's topics were made by ``prepare_cluster`` with the topology's settings;
        # copy the source's configs over them (compaction, retention) as they change
        "sync.topic.configs.enabled = true",
        "sync.topic.acls.enabled = false",
        "emit.heartbeats.enabled = false",
        "emit.checkpoints.enabled = true",
        f"emit.checkpoints.interval.seconds = {SYNC_S}",
        "sync.group.offsets.enabled = true",
        f"sync.group.offsets.interval.seconds = {SYNC_S}",
        "refresh.topics.interval.seconds = 5",
        "refresh.groups.interval.seconds = 5",
        # an offset sync every 10 records at most: a translated group offset is at most that far
        # behind (read again, deduplicated by the done marks and the chunk table)
        "offset.lag.max = 10",
        # its bookkeeping in the standby: nothing is written to the active region's cluster
        "offset-syncs.topic.location = target",
        # how far it copied, committed every second: the replication lag ops.replication reads
        # (a worker setting of the target cluster's Connect herder)
        f"{target}.offset.flush.interval.ms = 1000",
        "tasks.max = 2",
        f"replication.factor = {factor}",
        *[f"{name}.replication.factor = {factor}" for name in (
            "checkpoints.topic", "heartbeats.topic", "offset-syncs.topic", "offset.storage",
            "config.storage", "status.storage")],
        f"{target}.producer.acks = all",
        f"{target}.producer.enable.idempotence = true",
        "dedicated.mode.enable.internal.rest = false",
        "",
    ]
    return "\n".join(lines)


def _escaped(regex: str) -> str:
    return regex.replace("\\", "\\\\")
