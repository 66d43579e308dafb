"""Creates cronstream's topics as ``topology`` declares them, idempotently.

Topics are created up front (by ``stack up``, the API and workers at start) rather than left to
broker auto-creation, so partition counts and compaction are always what the topology says.
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from streams.topology import TOPICS, TopicSpec

log = logging.getLogger(__name__)


def ensure_topics(bootstrap: str, topics: tuple[TopicSpec, ...] = TOPICS,
                  timeout_s: float = 30.0) -> list[str]:
    """Create the missing topics; returns the names created. Raises if the broker refuses."""
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
