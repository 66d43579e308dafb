"""Read-only, in-memory views of compacted topics (tenants, jobs) for processes that own no table.

The API and the executor need "the current value per key" of small compacted topics; a view
consumes its topic from the beginning on a background thread, with no consumer group (so it never
takes partitions from the workers), and applies the process's own writes at once (``put``), so
a client that just created something can read it back from the same process.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from streams.codec import SchemaError, codec
from streams.topology import TopicSpec

log = logging.getLogger(__name__)


class TopicView:
    def __init__(self, bootstrap: str, topic: TopicSpec,
                 on_change: Callable[[str, dict[str, Any] | None], None] | None = None) -> None:
        self.topic = topic
        self._data: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._on_change = on_change
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": f"cronstream-view-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        })
        self._thread = threading.Thread(target=self._run, name=f"view-{topic.name}", daemon=True)

    def start(self, timeout_s: float = 60.0) -> TopicView:
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError(f"view of {self.topic.name} not caught up after {timeout_s}s")
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._data.get(key)

    def values(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._data.values())

    def put(self, key: str, value: dict[str, Any] | None) -> None:
        """Apply a write this process just made (the topic will deliver it again, harmlessly)."""
        with self._lock:
            if value is None:
                self._data.pop(key, None)
            else:
                self._data[key] = value
        if self._on_change:
            self._on_change(key, value)

    def _run(self) -> None:
        meta = self._consumer.list_topics(self.topic.name, timeout=30)
        parts = list(meta.topics[self.topic.name].partitions)
        self._consumer.assign([TopicPartition(self.topic.name, p, OFFSET_BEGINNING) for p in parts])
        at_end: set[int] = set()
        while not self._stop.is_set():
            msg = self._consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == msg.error()._PARTITION_EOF:
                    at_end.add(msg.partition())
                    if len(at_end) == len(parts):
                        self._ready.set()
                else:
                    log.warning("view %s: %s", self.topic.name, msg.error())
                    time.sleep(0.5)
                continue
            key = msg.key().decode() if msg.key() else ""
            try:
                value = codec().decode(msg.value()) if msg.value() is not None else None
            except SchemaError as exc:
                log.error("view %s: partition %d offset %d unreadable: %s", self.topic.name,
                          msg.partition(), msg.offset(), exc)
                continue
            self.put(key, value)
        self._consumer.close()
