"""The schedule stream: owns job state per partition and turns due slots into fired events.

Graph (see ``streams.topology``)::

    cronstream.jobs ──▶ [apply_job_commands] ──▶ table jobs (RocksDB + changelog)
                                   │
                           per-partition DueIndex ◀── rebuilt after each recovery
                                   │
                    punctuator fire_due (every 50 ms)
                         ├──▶ cronstream.fired   (slots to run)
                         ├──▶ cronstream.ledger  (slots decided without running)
                         └──▶ cronstream.scheduler-progress (fired-through marks)

Why a punctuator and not a table write per fire: faust table writes cap around 5k/s; the only
per-fire state is the in-memory due index, and what a restart needs (where to resume) is the
per-partition progress mark. Duplicates after a crash are harmless because fire ids are
deterministic (``job_id@nominal_time``) and the executor dedupes them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiokafka.partitioner import murmur2

from streams import misfire, progress, schedule
from streams.app import SETTINGS, WORKER_ID, app, ready_file
from streams.codec import codec
from streams.due_index import DueIndex
from streams.emit import Emitter
from streams.ledger import job_entry
from streams.topology import FIRED, JOBS, JOBS_TABLE, LEDGER, partitions

log = logging.getLogger(__name__)

FIRE_BATCH = 10_000
MARK_EVERY_S = 1.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def partition_for(job_id: str, count: int) -> int:
    """Kafka's default (murmur2) partition of a key: where the API's producer put the job."""
    return (murmur2(job_id.encode()) & 0x7FFFFFFF) % count


jobs_topic = app.topic(JOBS.name, key_serializer="raw", value_serializer="raw",
                       partitions=JOBS.partitions)
jobs_table = app.Table(JOBS_TABLE.name, key_type=bytes, value_type=bytes,
                       partitions=JOBS.partitions, help=JOBS_TABLE.doc)


class ScheduleState:
    """The worker's in-memory view of its partitions: due indexes and progress marks."""

    def __init__(self) -> None:
        self.indexes: dict[int, DueIndex] = {}
        self.fired_through: dict[int, int] = {}
        self.epoch = 0
        self._emitter: Emitter | None = None
        self._last_mark = 0.0

    @property
    def emitter(self) -> Emitter:
        if self._emitter is None:
            self._emitter = Emitter(SETTINGS.bootstrap, f"scheduler-{WORKER_ID}")
        return self._emitter

    def resume_point(self, partition: int, job: dict[str, Any]) -> int:
        """Slots after this instant are still owed a decision for ``job``."""
        return max(self.fired_through.get(partition, 0), job["updated_ms"] - 1)

    def track(self, partition: int, job: dict[str, Any]) -> None:
        index = self.indexes.get(partition)
        if index is None:
            return
        after = self.resume_point(partition, job)
        index.set(job["job_id"], schedule.next_after(job["schedule"], job["job_id"], after))

    def rebuild(self, assigned: set[int]) -> None:
        """After recovery: index every job of newly assigned partitions, drop revoked ones."""
        for part in list(self.indexes):
            if part not in assigned:
                del self.indexes[part]
        new = assigned - set(self.indexes)
        if not new:
            return
        marks = progress.load_marks(SETTINGS.bootstrap)
        count = partitions()
        for part in new:
            self.indexes[part] = DueIndex()
            self.fired_through[part] = marks.get(part, 0)
        started = time.monotonic()
        loaded = 0
        for key, raw in jobs_table.items():
            job_id = key.decode()
            part = partition_for(job_id, count)
            if part in new and raw is not None:
                self.track(part, codec().decode(raw))
                loaded += 1
        log.info("scheduler rebuilt partitions %s: %d jobs in %.2fs (epoch %d)",
                 sorted(new), loaded, time.monotonic() - started, self.epoch)

    def fire_due(self) -> int:
        """Decide every slot that is due now; returns how many slots were decided."""
        now = now_ms()
        decided = 0
        for part, index in self.indexes.items():
            for job_id, slot in index.pop_due(now, FIRE_BATCH):
                raw = jobs_table.get(job_id.encode())
                if raw is None:
                    continue  # deleted since it was indexed
                job = codec().decode(raw)
                following = schedule.next_after(job["schedule"], job_id, slot)
                self._decide(job, slot, following, now)
                index.set(job_id, following)
                decided += 1
            earliest = index.peek()
            through = now if earliest is None or earliest > now else earliest - 1
            self.fired_through[part] = max(self.fired_through.get(part, 0), through)
        return decided

    def _decide(self, job: dict[str, Any], slot: int, following: int | None, now: int) -> None:
        job_id = job["job_id"]
        fid = schedule.fire_id(job_id, slot)
        verdict = misfire.decide(
            slot_ms=slot, following_slot_ms=following, now_ms=now,
            policy=job["misfire_policy"], max_lateness_s=job["max_lateness_s"],
            paused=job["paused"],
        )
        if verdict.runs:
            fired = {
                "fire_id": fid, "job_id": job_id, "tenant": job["tenant"],
                "job_revision": job["revision"], "nominal_ms": slot, "fired_ms": now,
                "decision": verdict.decision, "epoch": self.epoch, "target": job["target"],
            }
            self.emitter.produce(FIRED, job_id, codec().encode("Fired", fired))
        else:
            entry = job_entry(fire_id=fid, job=job, nominal_ms=slot, decision=verdict.decision,
                              reason=verdict.reason, lateness_ms=verdict.lateness_ms,
                              epoch=self.epoch, outcome="not_run", completed_ms=now)
            self.emitter.produce(LEDGER, fid, codec().encode("LedgerEntry", entry))
            log.info("slot %s of tenant %s: %s (%s)", fid, job["tenant"], verdict.decision,
                     verdict.reason)

    async def maybe_mark(self) -> None:
        """Persist fired-through marks once the records before them are acknowledged."""
        if time.monotonic() - self._last_mark < MARK_EVERY_S or not self.indexes:
            return
        self._last_mark = time.monotonic()
        marks = dict(self.fired_through)
        await asyncio.get_running_loop().run_in_executor(None, self.emitter.flush)
        for part, through in marks.items():
            if part in self.indexes:
                progress.write_mark(self.emitter, part, through, self.epoch, WORKER_ID)


state = ScheduleState()


@jobs_table.on_recover
async def _on_jobs_recovered() -> None:
    state.epoch = app.consumer_generation_id
    assigned = {tp.partition for tp in app.consumer.assignment() if tp.topic == JOBS.name}
    state.rebuild(assigned)
    ready = ready_file(WORKER_ID)
    ready.parent.mkdir(parents=True, exist_ok=True)
    ready.write_text(f"{state.epoch} {sorted(assigned)}\n")


@app.on_partitions_revoked.connect
async def _on_revoked(app: Any, revoked: set[Any], **kwargs: Any) -> None:
    for tp in revoked:
        if tp.topic == JOBS.name:
            state.indexes.pop(tp.partition, None)


@app.agent(jobs_topic)
async def apply_job_commands(stream: Any) -> Any:
    """Materialise job commands into the table and the due index (the table's only writer)."""
    async for event in stream.events():
        job_id = event.key.decode()
        part = event.message.partition
        if event.value is None:
            jobs_table.pop(event.key, None)
            index = state.indexes.get(part)
            if index is not None:
                index.remove(job_id)
            continue
        jobs_table[event.key] = event.value
        state.track(part, codec().decode(event.value))


@app.timer(interval=0.05)
async def fire_due() -> None:
    """Punctuator: decide due slots, then (about once a second) persist progress marks."""
    state.fire_due()
    await state.maybe_mark()
