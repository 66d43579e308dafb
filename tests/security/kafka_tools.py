"""Kafka calls the security tests make from a child process (``stack.isolated.call``), so no
librdkafka client lives in the test run."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition

from streams.runtime.admin import client as admin_client
from streams.runtime.kafka_config import client_config


def commit_group(bootstrap: str, group: str, topic: str, partition: int, offset: int) -> bool:
    """Make ``group`` exist, named as the caller likes, by committing one offset."""
    committer = Consumer({**client_config(bootstrap), "group.id": group})
    committer.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
    committer.close()
    return True


def delete_group(bootstrap: str, group: str) -> bool:
    admin_client(bootstrap).delete_consumer_groups([group])[group].result(timeout=30)
    return True
