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


def keys_from(bootstrap: str, topic: str, partition: int, start: int) -> list[str]:
    """The keys of the records written to ``topic[partition]`` from offset ``start`` to its
    end as of now."""
    from streams.runtime.admin import end_offsets

    end = end_offsets(bootstrap, [(topic, partition)])[(topic, partition)]
    if end <= start:
        return []
    reader = Consumer({**client_config(bootstrap), "group.id": "cs-security-keys",
                       "enable.auto.commit": False})
    reader.assign([TopicPartition(topic, partition, start)])
    keys: list[str] = []
    try:
        while True:
            message = reader.poll(10)
            if message is None:
                raise TimeoutError(f"{topic}[{partition}] stopped before offset {end}")
            if message.error():
                continue
            keys.append((message.key() or b"").decode(errors="replace"))
            if message.offset() + 1 >= end:
                return keys
    finally:
        reader.close()
