"""Creates cronstream's topics as ``topology`` declares them, idempotently.

Topics are created up front (by ``stack up``, the API and workers at start) rather than left to
broker auto-creation, so partition counts and compaction are always what the topology says.
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from streams.topology import APP_ID, TABLES, TOPICS, TopicSpec


def changelog_topics() -> tuple[TopicSpec, ...]:
    """faust's changelog topic of every table, created up front with its source's partition
    count (left to faust, a worker's first start can race their creation and crash)."""
    return tuple(
        TopicSpec(name=t.changelog(APP_ID), key=t.key, schema="", compacted=True,
                  doc=f"changelog of table {t.name}", partitions=t.source.partitions)
        for t in TABLES)

log = logging.getLogger(__name__)


def ensure_topics(bootstrap: str, topics: tuple[TopicSpec, ...] | None = None,
                  timeout_s: float = 30.0) -> list[str]:
    """Create the missing topics; returns the names created. Raises if the broker refuses."""
    topics = topics if topics is not None else TOPICS + changelog_topics()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    wanted = [
        NewTopic(t.name, num_partitions=t.partitions, replication_factor=1, config=t.configs())
        for t in topics
        if t.name not in existing
    ]
    if not wanted:
        return []
    created = []
    for name, future in admin.create_topics(wanted, request_timeout=timeout_s).items():
        try:
            future.result()
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    log.info("created topics %s", created)
    return created
