"""Read-only views of compacted topics (tenants, jobs, campaigns) for processes that own no table.

The API and the executor need "the current value per key" of compacted topics; a view consumes
its topic on a background thread, with no consumer group (so it never takes partitions from the
workers), and applies the process's own writes at once (``put``), so a client that just created
something can read it back from the same process. Where the records are kept is the view's
store (``streams.runtime.record_stores``): a dict for small topics, or a SQLite file with a checkpoint,
from which a restarted view reads only the topic's tail.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from streams.runtime.clock import now_ms
from streams.runtime.codec import SchemaError
from streams.runtime.kafka_config import client_config
from streams.runtime.record_stores import Checkpoint, MemoryStore, Row, ViewStore
from streams.topology import TopicSpec

log = logging.getLogger(__name__)

WATCHDOG_S = 5.0  # how often a view compares its positions with the partitions' ends
STUCK_S = 10.0  # behind for this long without reading a record: reconnect
MARK_CURRENT_S = 60.0  # how often a current view with a durable store says so (``resume``)
BATCH = 5000  # records per consume and per store write: one message per poll took 74 s for 2.2M


class TopicView:
    def __init__(self, bootstrap: str, topic: TopicSpec, store: ViewStore | None = None) -> None:
        """A view of ``topic`` kept in ``store`` (a ``MemoryStore`` when None); nothing is read
        until ``start``."""
        self.topic = topic
        self.store: ViewStore = store if store is not None else MemoryStore()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self.positions: dict[int, int] = {}  # next offset to read, per partition
        self._seen_positions: dict[int, int] = {}
        self._marked_current = 0.0
        self._failure: BaseException | None = None
        self._config = {
            **client_config(bootstrap),
            "group.id": f"cronstream-view-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            # a resumed position below the log's start (records deleted) reads from the start;
            # librdkafka's default, the end, would skip records without a word
            "auto.offset.reset": "earliest",
        }
        # made by ``start``: a librdkafka client connects as it is made, and a view made but
        # never started (a unit test's, one a lazy holder never needed) should not
        self._consumer: Consumer
        self._thread = threading.Thread(target=self._run, name=f"view-{topic.name}", daemon=True)

    def start(self, timeout_s: float = 60.0) -> TopicView:
        if self._thread.ident is None:  # a second start raises below, as a thread's does
            self._consumer = Consumer(self._config)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.1):
            if self._failure is not None:
                raise RuntimeError(f"view of {self.topic.name} failed: {self._failure!r}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"view of {self.topic.name} not caught up after {timeout_s}s")
        return self

    def stop(self) -> bool:
        """Stop reading; True once the view's thread has ended (its store is then unused)."""
        self._stop.set()
        self._thread.join(timeout=5)
        return not self._thread.is_alive()

    def get(self, key: str) -> dict[str, Any] | None:
        return self.store.get(key)

    def wait_caught_up(self, timeout_s: float = 15.0) -> bool:
        """Block until the view has read every record written so far (False on timeout): a key
        missing from a view that lags is not yet a key that does not exist. Called from other
        threads, so the ends come from the shared AdminClient: the view's own consumer, polled
        by its thread, was seen blocking such a call for minutes."""
        from streams.runtime.admin import end_offsets

        try:
            highs = self._offsets(end_offsets, list(self.positions) or [0], min(timeout_s, 10))
        except Exception:  # noqa: BLE001 - cannot tell: the caller answers from what it has
            return False
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(self.positions.get(p, 0) >= high for p, high in highs.items() if high > 0):
                return True
            time.sleep(0.05)
        return False

    def put(self, key: str, value: dict[str, Any] | None) -> None:
        """Apply a write this process just made. The topic delivers it again; until then a view
        that lags may still apply an older record of the key over it, briefly."""
        self.store.put(key, value)

    def _offsets(self, lookup: Callable[..., dict[tuple[str, int], int]], parts: list[int],
                 timeout_s: float = 10.0) -> dict[int, int]:
        """``lookup`` (``admin.end_offsets`` or ``start_offsets``) for this topic's ``parts``,
        by partition. Through the process's AdminClient: the view's own consumer, polled by its
        thread, was seen blocking such calls for minutes."""
        found = lookup(self._config["bootstrap.servers"], [(self.topic.name, p) for p in parts],
                       timeout_s)
        return {p: at for (_, p), at in found.items()}

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
        if not parts:
            self._consumer.close()
            return
        started = time.monotonic()
        resume = self._resume(parts)
        self.positions.update(resume)
        self._consumer.assign([TopicPartition(self.topic.name, p, resume.get(p, OFFSET_BEGINNING))
                               for p in parts])
        at_end: set[int] = set()
        next_check = time.monotonic() + WATCHDOG_S
        stuck_since: float | None = None
        while not self._stop.is_set():
            if time.monotonic() > next_check:
                next_check = time.monotonic() + WATCHDOG_S
                stuck_since = self._watchdog(parts, stuck_since)
            first = self._consumer.poll(0.2)  # at once when a record comes: views serve lookups
            if first is None:
                continue
            ends = self._apply([first, *self._consumer.consume(BATCH - 1, 0)])
            for partition, offset in ends.items():
                self.positions[partition] = max(self.positions.get(partition, 0), offset)
                at_end.add(partition)
            if len(at_end) == len(parts) and not self._ready.is_set():
                log.info("view %s caught up in %.1fs (resumed from %s)", self.topic.name,
                         time.monotonic() - started, resume or "the beginning")
                self._mark_current()
                self._ready.set()
        self._consumer.close()

    def _mark_current(self) -> None:
        """Tell a durable store the view has read everything there was (now), once a minute
        at most: how long ago that was decides whether its checkpoint can be resumed."""
        if self.store.durable and time.monotonic() - self._marked_current > MARK_CURRENT_S:
            self._marked_current = time.monotonic()
            self.store.mark_current(now_ms())

    def _resume(self, parts: list[int]) -> dict[int, int]:
        """Where a durable store left off, if the topic as it is now lets it resume there."""
        if not self.store.durable:
            return {}
        from streams.runtime.admin import end_offsets, start_offsets, topic_config, topic_id

        bootstrap, name = self._config["bootstrap.servers"], self.topic.name
        while not self._stop.is_set():
            try:
                checkpoint = Checkpoint(
                    source=topic_id(bootstrap, name),
                    starts=self._offsets(start_offsets, parts),
                    ends=self._offsets(end_offsets, parts),
                    tombstones_kept_ms=int(topic_config(bootstrap, name, "delete.retention.ms")),
                    now_ms=now_ms())
            except Exception as exc:  # noqa: BLE001 - a broker still starting: wait for it
                log.info("view %s: waiting for the topic's id, offsets and config (%s)", name, exc)
                time.sleep(0.5)
                continue
            return self.store.resume(checkpoint)
        return {}

    def _apply(self, batch: list[Message]) -> dict[int, int]:
        """Write a consumed batch to the store, then count it read (so a record counted is
        readable); returns the partitions that reported their end, with the end offset."""
        latest: dict[str, Message] = {}  # a key's last record of the batch is what it ends as
        read: dict[int, int] = {}
        ends: dict[int, int] = {}
        for msg in batch:
            error = msg.error()
            if error is not None:
                if error.code() == error._PARTITION_EOF:
                    ends[msg.partition()] = msg.offset()
                else:
                    log.warning("view %s: %s", self.topic.name, error)
                    time.sleep(0.5)
                continue
            latest.pop(key := msg.key().decode() if msg.key() else "", None)
            latest[key] = msg
            read[msg.partition()] = msg.offset() + 1
        held = self.store.holding({key: msg.value() for key, msg in latest.items()})
        rows: list[Row] = []
        for key, msg in latest.items():
            if key in held:
                continue
            try:
                rows.append(self.store.prepare(key, msg.value()))
            except SchemaError as exc:
                log.error("view %s: partition %d offset %d (key %s) unreadable: %s",
                          self.topic.name, msg.partition(), msg.offset(), key, exc)
        if read:
            self._write(rows, read)
            self.positions.update(read)
        return ends

    def _write(self, rows: list[Row], read: dict[int, int]) -> None:
        """Write a batch, retrying while the store fails (a full disk): a view that stopped
        here would serve ever older records without anyone noticing."""
        delay = 0.5
        while True:
            try:
                self.store.write(rows, read)
                return
            except Exception:
                log.exception("view %s: could not store %d records up to offsets %s; retrying "
                              "in %.1fs", self.topic.name, len(rows), read, delay)
                if self._stop.is_set():
                    raise
            self._stop.wait(delay)
            delay = min(delay * 2, 30.0)

    def _watchdog(self, parts: list[int], stuck_since: float | None) -> float | None:
        """Re-create the consumer if it sits behind the end of a partition without reading.

        Seen after a broker restart: the consumer of an assigned (group-less) partition polled
        nothing for minutes while records arrived, so a worker did not see a new campaign.
        Returns since when the view has been stuck (None when it is not)."""
        from streams.runtime.admin import end_offsets

        try:  # from the AdminClient: the view's own consumer is the suspect (it answered
            # nothing either after a broker restart, so the view was never judged stuck)
            ends = self._offsets(end_offsets, parts, 5)
        except Exception:  # noqa: BLE001 - a broker away: nothing to judge yet
            return stuck_since
        behind = [p for p in parts if self.positions.get(p, 0) < ends[p]]
        if not behind:
            self._mark_current()
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


class StartedOnce:
    """A view started on first use, off the event loop (catching up blocks for seconds, and a
    blocked loop misses heartbeats), and started once however many tasks ask at the same time:
    each waits for the one start. Without the lock every slot of a spike's first round (up to
    the executor's 256 in flight) saw no view yet and started its own consumer and thread."""

    def __init__(self, make: Callable[[], TopicView]) -> None:
        self._make = make
        self._view: TopicView | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> TopicView:
        if self._view is None:
            async with self._lock:
                if self._view is None:
                    view = self._make()
                    await asyncio.get_running_loop().run_in_executor(None, view.start)
                    self._view = view
        return self._view

    @property
    def started(self) -> TopicView | None:
        """The view once it has started (caught up), else None; never waits."""
        return self._view
