"""A reader of one topic's partitions: a librdkafka consumer in a thread of its own, handing the
event loop a batch at a time. The executor reads ``cronstream.fired`` with one
(``streams.execution.executor``), the scheduler ``cronstream.jobs`` (``streams.scheduling.applying``).

Why not a faust agent: faust hands an agent one record per event-loop turn (four tasks and an
``asyncio.wait`` each, robinhood/faust#563, faust-streaming/faust#229), and commits inside its
fetch loop with a producer flush (5-15 s stalls in a spike): in a 100k-slot spike the executor sat
idle waiting for records while the box's cores went to delivering them (docs/performance.md,
"Webhook runs"), and a million imported jobs were applied at 2k a second per worker, four fifths
of it faust's delivery (issue 44). librdkafka fetches in its own threads; this thread only moves
each batch to the loop (one wake per batch) and applies its owner's commands.

Its partitions are the worker's partitions of the job-keyed topics (faust assigns them:
``streams.topology.OWNED``; every job-keyed topic and the tables' changelogs are co-partitioned),
handed over by the owner after each recovery, so the table it writes or reads is the one its
worker owns. It commits to a group of its own (``streams.topology.consumer_group``) that never has
members: assignment by hand, offsets only, each one an offset the owner proved done.

Everything that touches the consumer (assign, unassign, commit, consume) happens on this thread,
in the order the owner asked for it, and the loop is told in that same order: a partition's
``Assigned`` notice (with the offset it is read from) reaches the loop after every batch read
under an earlier assignment and before any record read under this one. The loop forgets a
partition the moment it is revoked, so a batch read before the revocation finds it forgotten
(dropped), and one read after a new assignment finds it assigned anew: no record is lost to a
reassignment or taken twice (``streams.execution.offsets.Taken``).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from streams.runtime.kafka_config import client_config
from streams.topology import TopicSpec, consumer_group

log = logging.getLogger(__name__)

BATCH = 2_000  # records handed to the loop at once at most (by default)
IDLE_WAIT_S = 0.1  # how long one poll waits for a record when nothing has come
COMMIT_TIMEOUT_S = 10.0
RETRY_S = 1.0  # after a step that failed


@dataclass(frozen=True)
class Assigned:
    """Partitions now read, each from the offset the loop's bookkeeping starts at."""

    starts: dict[int, int | None]


Notice = Assigned | list[Message]


def consumer_config(bootstrap: str, client_id: str, group: str) -> dict[str, Any]:
    return {
        **client_config(bootstrap),
        "group.id": group,
        "client.id": client_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        # a slot due now (a job created now) is fetched as soon as it is appended, not after a
        # 500 ms fetch wait
        "fetch.wait.max.ms": 20,
    }


class PartitionReader:
    def __init__(self, bootstrap: str, client_id: str, topic: TopicSpec,
                 consumer_factory: Callable[[dict[str, Any]], Any] = Consumer, *,
                 batch: int = BATCH, handed_at_most: int | None = None) -> None:
        """``batch``: records handed over at once at most. ``handed_at_most``: batches handed to
        the loop and not yet taken by it, at most (None: no bound, the owner paces the reader
        with ``room``). Why a bound: the loop runs every callback queued since its last turn
        before its timers, so twenty batches queued while it applied one were applied as one
        three-second block of the scheduler's punctuator (the jobs reader, at a million-job
        import)."""
        self.topic, self.group = topic, consumer_group(topic)
        self.batch = batch
        self._handed = None if handed_at_most is None else threading.Semaphore(handed_at_most)
        self._config = consumer_config(bootstrap, client_id, self.group)
        self._factory = consumer_factory
        self._commands: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self.room = threading.Event()  # cleared while the loop has enough read ahead
        self.room.set()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._assigned: set[int] = set()

    def start(self, loop: asyncio.AbstractEventLoop, deliver: Callable[[Notice], None]) -> None:
        """Start the thread; ``deliver`` is called on ``loop`` with each notice, in order."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, args=(loop, deliver),
                                        name=f"{topic_short(self.topic)}-reader", daemon=True)
        self._thread.start()

    # -- commands from the loop, applied on the thread in this order ------------------------------
    def assign(self, partitions: set[int]) -> None:
        self._commands.put(("assign", frozenset(partitions)))

    def revoke(self, partitions: set[int]) -> None:
        self._commands.put(("revoke", frozenset(partitions)))

    def commit(self, offsets: dict[int, int], on_failed: Callable[[int, int], None]) -> None:
        """Commit ``offsets`` (partition -> next offset); ``on_failed`` (partition, offset) is
        called on the loop for each one the broker refused."""
        if offsets:
            self._commands.put(("commit", (dict(offsets), on_failed)))

    def close(self) -> None:
        self._closed.set()
        self.room.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- the thread ------------------------------------------------------------------------------
    def _run(self, loop: asyncio.AbstractEventLoop, deliver: Callable[[Notice], None]) -> None:
        consumer = self._factory(self._config)
        try:
            while not self._closed.is_set():
                try:
                    self._step(consumer, loop, deliver)
                except Exception:  # a broker that does not answer, say: the runs wait, no more
                    log.exception("%s reader: a step failed (partitions %s); trying again in %s s",
                                  self.topic.name, sorted(self._assigned), RETRY_S)
                    self._closed.wait(RETRY_S)
        finally:
            consumer.close()

    def _step(self, consumer: Any, loop: asyncio.AbstractEventLoop,
              deliver: Callable[[Notice], None]) -> None:
        # with nothing assigned there is nothing to read: wait for a command instead
        self._apply_commands(consumer, loop, deliver,
                             wait_s=0.0 if self._assigned else IDLE_WAIT_S)
        if not self._assigned:
            return
        if not self.room.is_set():
            self.room.wait(IDLE_WAIT_S)
            return
        batch = self._read(consumer)
        if batch:
            self._hand(loop, deliver, batch)

    def _hand(self, loop: asyncio.AbstractEventLoop, deliver: Callable[[Notice], None],
              batch: list[Message]) -> None:
        """Hand ``batch`` to the loop, once fewer than ``handed_at_most`` are waiting there."""
        handed = self._handed
        if handed is None:
            loop.call_soon_threadsafe(deliver, batch)
            return
        while not handed.acquire(timeout=IDLE_WAIT_S):
            if self._closed.is_set():
                return

        def taken() -> None:
            try:
                deliver(batch)
            finally:
                handed.release()
        loop.call_soon_threadsafe(taken)

    def _read(self, consumer: Any) -> list[Message]:
        """One wait for a record, then whatever else is fetched already (no second wait): a slot
        due now costs no batch timeout, and a spike comes in batches of up to ``batch``."""
        first = consumer.poll(IDLE_WAIT_S)
        if first is None:
            return []
        batch = [first, *consumer.consume(self.batch - 1, 0)]
        good = [msg for msg in batch if msg.error() is None]
        for msg in batch:
            error = msg.error()
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                log.warning("%s reader: %s (partition %s offset %s)", self.topic.name, error,
                            msg.partition(), msg.offset())
        return good

    def _apply_commands(self, consumer: Any, loop: asyncio.AbstractEventLoop,
                        deliver: Callable[[Notice], None], wait_s: float) -> None:
        """Apply every command queued, in order; the first is waited for up to ``wait_s``."""
        while True:
            try:
                kind, arg = (self._commands.get(timeout=wait_s) if wait_s
                             else self._commands.get_nowait())
            except queue.Empty:
                return
            wait_s = 0.0
            if kind == "assign":
                try:
                    starts = self._assign(consumer, arg - self._assigned)
                except Exception:
                    # its commits could not be read: asked again first thing next step, ahead
                    # of anything queued after it (a revocation must still follow it)
                    self._retry_first(("assign", arg))
                    raise
                if starts:
                    loop.call_soon_threadsafe(deliver, Assigned(starts))
            elif kind == "revoke":
                gone = arg & self._assigned
                if gone:
                    consumer.incremental_unassign([TopicPartition(self.topic.name, p) for p in gone])
                    self._assigned -= gone
            else:
                offsets, on_failed = arg
                self._commit(consumer, offsets, loop, on_failed)

    def _retry_first(self, command: tuple[str, Any]) -> None:
        """Put ``command`` back at the head of the queue, the rest behind it in their order."""
        rest: list[tuple[str, Any]] = []
        while True:
            try:
                rest.append(self._commands.get_nowait())
            except queue.Empty:
                break
        for queued in (command, *rest):
            self._commands.put(queued)

    def _assign(self, consumer: Any, new: frozenset[int]) -> dict[int, int | None]:
        if not new:
            return {}
        wanted = [TopicPartition(self.topic.name, p) for p in sorted(new)]
        committed = consumer.committed(wanted, timeout=COMMIT_TIMEOUT_S)
        starts: dict[int, int | None] = {}
        assign = []
        for tp in committed:
            if tp.error is not None or tp.offset < 0:
                # seeded by every worker at start (streams.runtime.admin.seed_group_offsets),
                # so only a partition added since: its whole log (re-reading is harmless)
                log.warning("%s partition %d has no commit in group %s (%s): read from its "
                            "start", self.topic.name, tp.partition, self.group, tp.error)
                starts[tp.partition] = None
                assign.append(TopicPartition(self.topic.name, tp.partition, OFFSET_BEGINNING))
            else:
                starts[tp.partition] = tp.offset
                assign.append(TopicPartition(self.topic.name, tp.partition, tp.offset))
        consumer.incremental_assign(assign)
        self._assigned |= new
        log.info("%s reader: partitions %s assigned, from %s", self.topic.name, sorted(new),
                 starts)
        return starts

    def _commit(self, consumer: Any, offsets: dict[int, int], loop: asyncio.AbstractEventLoop,
                on_failed: Callable[[int, int], None]) -> None:
        tps = [TopicPartition(self.topic.name, p, o) for p, o in offsets.items()]
        try:
            result = consumer.commit(offsets=tps, asynchronous=False)
        except Exception as exc:  # noqa: BLE001 - a commit that failed is tried again later
            log.warning("commit of %s offsets %s failed: %s", self.topic.name, offsets, exc)
            for p, o in offsets.items():
                loop.call_soon_threadsafe(on_failed, p, o)
            return
        for tp in result or []:
            if tp.error is not None:
                log.warning("commit of %s partition %d offset %d failed: %s", self.topic.name,
                            tp.partition, tp.offset, tp.error)
                loop.call_soon_threadsafe(on_failed, tp.partition, tp.offset)


def topic_short(topic: TopicSpec) -> str:
    """A topic's name without the ``cronstream.`` prefix: the reader thread's name."""
    return topic.name.rsplit(".", 1)[-1]
