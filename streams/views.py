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

WATCHDOG_S = 5.0  # how often a view compares its positions with the partitions' ends
STUCK_S = 10.0  # behind for this long without reading a record: reconnect


class TopicView:
    def __init__(self, bootstrap: str, topic: TopicSpec,
                 on_change: Callable[[str, dict[str, Any] | None], None] | None = None) -> None:
        self.topic = topic
        self._data: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._on_change = on_change
        self._stop = threading.Event()
        self._ready = threading.Event()
        self.positions: dict[int, int] = {}  # next offset to read, per partition
        self._seen_positions: dict[int, int] = {}
        self._failure: BaseException | None = None
        self._config = {
            "bootstrap.servers": bootstrap,
            "group.id": f"cronstream-view-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
        self._consumer = Consumer(self._config)
        self._thread = threading.Thread(target=self._run, name=f"view-{topic.name}", daemon=True)

    def start(self, timeout_s: float = 60.0) -> TopicView:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.1):
            if self._failure is not None:
                raise RuntimeError(f"view of {self.topic.name} failed: {self._failure!r}")
            if time.monotonic() > deadline:
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

    def wait_caught_up(self, timeout_s: float = 15.0) -> bool:
        """Block until the view has read every record written so far (False on timeout): a key
        missing from a view that lags is not yet a key that does not exist. Called from other
        threads, so the ends come from the shared AdminClient: the view's own consumer, polled
        by its thread, was seen blocking such a call for minutes."""
        from streams.admin import end_offsets

        parts = list(self.positions) or [0]
        try:
            highs = {p: high for (_, p), high in end_offsets(
                self._config["bootstrap.servers"], [(self.topic.name, p) for p in parts],
                min(timeout_s, 10)).items()}
        except Exception:  # noqa: BLE001 - cannot tell: the caller answers from what it has
            return False
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(self.positions.get(p, 0) >= high for p, high in highs.items() if high > 0):
                return True
            time.sleep(0.05)
        return False

    def put(self, key: str, value: dict[str, Any] | None) -> None:
        """Apply a write this process just made (the topic will deliver it again, harmlessly)."""
        with self._lock:
            if value is None:
                self._data.pop(key, None)
            else:
                self._data[key] = value
        if self._on_change:
            self._on_change(key, value)

    def _partitions(self) -> list[int]:
        """The topic's partitions, waiting out a broker that is still starting."""
        while not self._stop.is_set():
            try:
                meta = self._consumer.list_topics(self.topic.name, timeout=10).topics[self.topic.name]
                if meta.error is None and meta.partitions:
                    return list(meta.partitions)
                log.info("view %s: waiting for metadata (%s)", self.topic.name, meta.error)
            except Exception as exc:  # noqa: BLE001 - retried until stopped
                log.info("view %s: waiting for metadata (%s)", self.topic.name, exc)
            time.sleep(0.5)
        return []

    def _run(self) -> None:
        try:
            self._follow()
        except BaseException as exc:
            self._failure = exc
            log.exception("view %s stopped", self.topic.name)
            raise

    def _follow(self) -> None:
        parts = self._partitions()
        self._consumer.assign([TopicPartition(self.topic.name, p, OFFSET_BEGINNING) for p in parts])
        at_end: set[int] = set()
        next_check = time.monotonic() + WATCHDOG_S
        stuck_since: float | None = None
        while not self._stop.is_set():
            if time.monotonic() > next_check:
                next_check = time.monotonic() + WATCHDOG_S
                stuck_since = self._watchdog(parts, stuck_since)
            msg = self._consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == msg.error()._PARTITION_EOF:
                    self.positions[msg.partition()] = max(self.positions.get(msg.partition(), 0),
                                                          msg.offset())
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
                self.positions[msg.partition()] = msg.offset() + 1
                continue
            self.put(key, value)
            self.positions[msg.partition()] = msg.offset() + 1  # after put: readable when counted
        self._consumer.close()

    def _watchdog(self, parts: list[int], stuck_since: float | None) -> float | None:
        """Re-create the consumer if it sits behind the end of a partition without reading.

        Seen after a broker restart: the consumer of an assigned (group-less) partition polled
        nothing for minutes while records arrived, so a worker did not see a new campaign.
        Returns since when the view has been stuck (None when it is not)."""
        from streams.admin import end_offsets

        try:  # from the AdminClient: the view's own consumer is the suspect (it answered
            # nothing either after a broker restart, so the view was never judged stuck)
            ends = end_offsets(self._config["bootstrap.servers"],
                               [(self.topic.name, p) for p in parts], timeout_s=5)
        except Exception:  # noqa: BLE001 - a broker away: nothing to judge yet
            return stuck_since
        behind = [p for p in parts if self.positions.get(p, 0) < ends[(self.topic.name, p)]]
        if not behind:
            return None
        now = time.monotonic()
        if stuck_since is None or self.positions != self._seen_positions:
            self._seen_positions = dict(self.positions)  # reading, however slowly: not stuck
            return now
        if now - stuck_since < STUCK_S:
            return stuck_since
        log.warning("view %s: partitions %s behind their end for %.0fs; reconnecting",
                    self.topic.name, behind, now - stuck_since)
        self._consumer.close()
        self._consumer = Consumer(self._config)
        self._consumer.assign([TopicPartition(self.topic.name, p, self.positions.get(p, 0))
                               for p in parts])
        return None
