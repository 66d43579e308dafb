"""The schedule stream: owns job state per partition and turns due slots into decisions.

Graph (names from ``streams.topology``)::

    cronstream.jobs ─────────▶ [apply_jobs] ──▶ table jobs (RocksDB + changelog)
                                     │             └─▶ per-partition DueIndex (rebuilt on recovery)
    cronstream.job-commands ─▶ [apply_job_commands]  (trigger, backfill)
    the executor, in-process ─▶ slot_decided          (resolves the reconciler's pending slot;
                                                      deletes a completed job that asked to be)

    punctuator fire_due (50 ms)  ─┬─▶ cronstream.fired   slots to run (+ reconciler pending)
                                  ├─▶ cronstream.ledger  slots decided without running
                                  └─▶ cronstream.scheduler-progress  fired-through marks (1 s)
    punctuator reconcile (5 s)   ──▶ cronstream.fired (re-drive) / cronstream.ledger (expire)

Slots due within ``PREPARE_AHEAD_MS`` (10 s) are staged and prepared ahead (job read and decoded,
following slot and fire id computed, done table checked, the fired record encoded but for the
fields only known when it fires) in the time before they fall due, so in a top-of-minute
spike's own second a slot costs little more than its produce.

Why a punctuator and not a table write per fire: faust table writes cap around 5k/s; the only
per-fire state is the in-memory due index, and what a restart needs (where to resume) is the
per-partition progress mark. Duplicates after a crash are harmless because fire ids are
deterministic (``job_id@nominal_time``) and the executor dedupes them. Every record carries the
consumer-group generation as its epoch, so a zombie's records can be told apart (the executor
rejects them).

``register`` puts this sub-topology on a worker's app (``streams.worker`` calls it); nothing
happens at import.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from streams.runtime import admin, metrics, standbys
from streams.runtime.app import Runtime
from streams.runtime.clock import now_ms
from streams.runtime.codec import codec
from streams.runtime.emit import Emitter
from streams.runtime.region import fence_epoch
from streams.scheduling import fired_tail, misfire, progress, schedule
from streams.scheduling.catch_up import CatchUpLane
from streams.scheduling.due_index import DueIndex
from streams.scheduling.imports import ImportWindow, imported, stale
from streams.scheduling.ledger import job_entry
from streams.scheduling.partitions import Partitions
from streams.scheduling.priority import Gate, collections_deferred
from streams.scheduling.reconciler import DEFAULT_LAG_MS, ExecutorQueue, Pending, Reconciler
from streams.scheduling.slots import (
    JobStore,
    Prepared,
    due_ms,
    fired_frozen,
    fired_template,
    lateness_bound_ms,
    prepare,
    schedule_next,
)
from streams.topology import (
    APP_ID,
    FIRED,
    INTENT,
    JOB_COMMANDS,
    JOBS,
    JOBS_TABLE,
    LEDGER,
)

log = logging.getLogger(__name__)

# slots a user asked to run now: their run is due by max_lateness_s after the asking, not the slot
ASKED_FOR = frozenset({"triggered", "backfilled"})
FIRE_TICK_S = 0.05  # the deciding punctuator's interval
FIRE_ROUND = 500  # slots popped per partition per round
FIRE_BUDGET_S = 0.1  # time one tick may spend deciding before yielding the event loop
MARK_EVERY_S = 1.0
MARK_FLUSH_S = 0.5  # the most a mark round waits for the records before it (maybe_mark)
CATCH_UP_PER_JOB_S = 20  # a job's missed slots run a second, in turns (streams.scheduling.catch_up)
PREPARE_AHEAD_MS = 10_000  # how long before its due time a slot may be prepared
PREPARE_BUDGET_S = 0.03  # time one tick may spend preparing, after firing what is due
PREPARED_MAX = 200_000  # per worker: bounds the memory of a far larger spike (~1 KiB each)
# How long the scheduler's producer gathers records into a batch. Why not librdkafka's 5 ms
# (the other emitters'): the broker's cost of a spike is per batch more than per record. Two
# producers sending a 100k-slot second at 5 ms took the broker 0.62 s of CPU, on the two cores
# the workers decide on, and at 50 ms 0.15 s (``bench.batching``: medians of 5 rounds on a fresh
# broker). A record's CreateTime, its fire time, is still the moment it was decided; what waits
# up to 50 ms more is its append, and in a burst its run waits a second anyway
# (streams.scheduling.priority).
FIRED_LINGER_MS = 50


class Runs(Protocol):
    """What the executor knows of the slots it runs (``streams.execution.executor.Executor``),
    handed in by the composition root so scheduling never imports execution."""

    def done_mark(self, partition: int, fid: str) -> bytes | None: ...
    def in_flight_ids(self) -> set[str]: ...
    def queues(self, ends: dict[int, int]) -> dict[int, ExecutorQueue]: ...


class ScheduleState:
    """The worker's in-memory view of its partitions, and the deciding of their due slots.

    Its sections, in the order a slot meets them: owning partitions (``rebuild`` and ``drop``
    hand them to ``streams.scheduling.partitions``, with the reconciler's and catch-up's
    share), firing (``fire_due``: the spike lane for slots prepared ahead, else ``_fire`` and
    ``decide`` by the misfire policy), emitting (``emit_fired``, ``emit_ledger``),
    commands, the reconciler's sweep and the progress marks. Its parts live beside it: the owned
    and standby partitions in ``streams.scheduling.partitions``, a slot's index entry and
    preparation in ``streams.scheduling.slots``, the previous owner's fires in
    ``streams.scheduling.takeover``, catch-up turns in ``streams.scheduling.catch_up``."""

    def __init__(self, jobs: JobStore, runs: Runs, *, bootstrap: str = "", worker_id: str = "",
                 clock: Callable[[], int] = now_ms,
                 load_marks: Callable[[str], dict[int, int]] = progress.load_marks,
                 read_fired: Callable[[str, dict[int, int]], dict[int, dict[str, int]]] = fired_tail.read,
                 fire_budget_s: float = FIRE_BUDGET_S,
                 prepare_budget_s: float = PREPARE_BUDGET_S,
                 reconciler_lag_ms: int = DEFAULT_LAG_MS) -> None:
        self.jobs = jobs  # the jobs table (a faust table in a worker)
        self.runs = runs  # what the executor knows of the slots it runs (``Runs``)
        self.bootstrap, self.worker_id, self.clock = bootstrap, worker_id, clock
        self.partitions = Partitions(jobs, bootstrap=bootstrap, load_marks=load_marks,
                                     read_fired=read_fired)
        # time one tick may spend deciding, and then preparing, before it yields the event loop
        self.fire_budget_s, self.prepare_budget_s = fire_budget_s, prepare_budget_s
        self.epoch = 0  # fence_epoch of the region's epoch and the group's generation
        self.generation = 0  # the consumer group's, at the last assignment
        self.reconciler = Reconciler(lag_ms=reconciler_lag_ms)
        self.catch_up: dict[int, CatchUpLane] = {}  # partition -> its missed slots' turns
        # slots decided and slots reached without a preparation since the worker started
        self.decided = self.reached_at_due = 0
        self._uncounted: dict[str, int] = {}  # decision -> slots not in the metric yet
        self._uncounted_reached = {"ahead": 0, "at_due": 0}
        self._varying: tuple[int, str, int] | None = None  # fired_ms, decision, epoch of _run
        self._run = b""  # their encoding (codec.RecordTemplate.encode_run)
        self._emitter: Emitter | None = None
        self._last_mark = 0.0
        self.next_due_ms: int | None = None  # the earliest due time left after fire_due
        # the last slots of jobs with delete_after_completion, fire id -> (partition, job id):
        # the job is deleted once the slot's decision is on the ledger (``decision_recorded``)
        self.completing: dict[str, tuple[int, str]] = {}

    @property
    def emitter(self) -> Emitter:
        if self._emitter is None:
            self._emitter = Emitter(self.bootstrap, f"scheduler-{self.worker_id}",
                                   **{"linger.ms": FIRED_LINGER_MS})
        return self._emitter

    # -- owning partitions (streams.scheduling.partitions) --------------------------------------
    def under_region(self, region_epoch: int) -> None:
        """The epoch of what this scheduler writes from now: its region's epoch (the lease it
        decides under) above its group's generation (``region.fence_epoch``)."""
        self.epoch = fence_epoch(region_epoch, self.generation)

    def rebuild(self, assigned: set[int], standbys: set[int]) -> None:
        """After recovery: release revoked partitions, adopt newly assigned ones."""
        for part in self.partitions.revoked(assigned):
            self.drop(part)
        self.partitions.adopt(assigned, standbys, self.epoch)
        for part, job_id in self.partitions.take_completed():
            self.delete_completed(part, job_id)

    def drop(self, partition: int) -> None:
        """Revoked: its pending slots leave the reconciler, its catch-up turns end and its
        waiting slots go back to its index, which stays warm."""
        self.reconciler.drop_partition(partition)
        for fid in [f for f, (part, _) in self.completing.items() if part == partition]:
            del self.completing[fid]  # its next owner finds the job completed when it adopts it
        lane = self.catch_up.pop(partition, None)
        self.partitions.release(partition, lane.waiting() if lane is not None else {})

    # -- firing --------------------------------------------------------------------------------
    def fire_due(self) -> bool:
        """Decide the slots that are due now, then prepare the ones due soon. True when due
        slots are left over that are still on time (a spike bigger than one round): the
        punctuator then goes on at once instead of waiting for its next tick.

        Work is cut into rounds of ``FIRE_ROUND`` slots per partition (round-robin, so one
        partition's backlog cannot starve another's) and stops after ``self.fire_budget_s``: after a
        long outage the backlog of missed slots is worked off over several ticks while the same
        event loop keeps consuming job changes and running fired slots. Preparing comes second
        and only uses what is left of a short budget: it must never delay a due slot."""
        owned = self.partitions
        now = self.clock()
        started = time.monotonic()
        busy = True
        while busy and time.monotonic() < started + self.fire_budget_s:
            busy = False
            for part, index in list(owned.indexes.items()):
                due = index.pop_due(now, FIRE_ROUND)
                busy = busy or len(due) == FIRE_ROUND
                for job_id, slot, ready in self._fire_on_time(part, index, due, now):
                    self._fire(part, index, job_id, slot, ready, now)
                ahead = sum(ready is not None for _, _, ready in due)
                if ahead:  # one increment a round rather than one lock a slot
                    self._uncounted_reached["ahead"] += ahead
        owned.settle_previous_fires(time.monotonic() + self.prepare_budget_s, self.reconciler)
        oldest, self.next_due_ms = now, None
        for part, index in owned.indexes.items():
            earliest = index.peek()
            through = now if earliest is None or earliest > now else earliest - 1
            oldest = min(oldest, through + 1)
            lane = self.catch_up.get(part)
            bound = None if lane is None else lane.mark_bound(now, through == now)
            if bound is not None:  # missed slots wait for their turns (streams.scheduling.catch_up)
                through = min(through, bound)
            owned.mark(part, through)
            if earliest is not None and (self.next_due_ms is None or earliest < self.next_due_ms):
                self.next_due_ms = earliest
        self.count()
        if not busy:
            self.prepare_upcoming(now, time.monotonic() + self.prepare_budget_s)
        metrics.SLOTS_PREPARED.set(sum(index.prepared for index in owned.indexes.values()))
        return busy and now - oldest <= misfire.MISFIRE_THRESHOLD_MS

    def prepare_upcoming(self, now: int, stop_at: float) -> int:
        """Stage and prepare slots due within ``PREPARE_AHEAD_MS``, round-robin over the
        partitions, until ``stop_at`` or ``PREPARED_MAX``; returns how many were prepared."""
        prepared = 0
        busy = True
        while busy and time.monotonic() < stop_at:
            busy = False
            indexes = self.partitions.indexes
            for part, index in indexes.items():
                room = PREPARED_MAX - sum(i.prepared for i in indexes.values())
                if room <= 0:
                    return prepared
                staged = index.stage(now + PREPARE_AHEAD_MS, min(FIRE_ROUND, room))
                busy = busy or len(staged) == FIRE_ROUND
                for job_id, slot in staged:
                    ready = self._prepare(part, job_id, slot)
                    if ready is not None:
                        index.attach(job_id, ready)
                        prepared += 1
        return prepared

    def _prepare(self, part: int, job_id: str, slot: int) -> Prepared | None:
        raw = self.jobs.get_in(part, job_id.encode())
        if raw is None:
            return None  # deleted since it was indexed
        job = codec().decode(raw)
        return prepare(job, slot, self.already_done(part, schedule.fire_id(job_id, slot)),
                       self.clock())

    def _fire_on_time(self, part: int, index: DueIndex, due: list[tuple[str, int, Any]],
                      now: int) -> list[tuple[str, int, Any]]:
        """The spike lane: fire the slots of ``due`` whose preparation already settled
        everything but the moment (reached on time, not done, prepared before the slot, so no
        one can have run it since), and return the others for ``_fire``, which decides them
        in full. It is ``_fire`` and ``decide`` for that one case, with nothing decided twice:
        in a top-of-minute spike every slot is this case, and the calls between deciding and
        producing were half of a slot's cost in the spike's own second. The lane's records are
        queued together at its end (``Emitter.produce_all``), before those of the slots it
        hands back; nothing orders records of different jobs (one job has one slot in a round),
        and a handed-back slot's decision is only later by the lane's share of the round
        (≤ ``FIRE_ROUND`` × a few µs)."""
        rest: list[tuple[str, int, Any]] = []
        if not due:
            return rest
        expect = self.reconciler.expect
        join, records = fired_template().join, []
        run_at, run = -1, b""
        for entry in due:
            job_id, slot, ready = entry
            if ready is None or now > ready.lane_until:
                rest.append(entry)
                continue
            at = self.clock()
            if at != run_at:
                run_at, run = at, self._run_of(at, "fired")
            records.append((job_id, join(ready.frozen, run)))
            expect(Pending(ready.fid, job_id, part, slot, at, ready.max_lateness_ms))
            if ready.following is None:
                index.remove(job_id)
                if ready.job["delete_after_completion"]:
                    self.completing[ready.fid] = (part, job_id)
            else:
                index.set(job_id, ready.following, ready.following_due)
        if records:
            self.emitter.produce_all(FIRED, records, part)
            self._uncounted["fired"] = self._uncounted.get("fired", 0) + len(records)
        return rest

    def _fire(self, part: int, index: DueIndex, job_id: str, slot: int,
              ready: Prepared | None, now: int) -> None:
        if self.partitions.takeover.claim(part, job_id, slot,
                                          ready.fid if ready is not None else None):
            return  # fired past its mark by a previous owner: its record is on the topic
        if ready is None:
            ready = self._prepare(part, job_id, slot)
            if ready is None:
                return
            self._uncounted_reached["at_due"] += 1
        job = ready.job
        verdict = misfire.decide(
            slot_ms=slot, following_slot_ms=ready.following, now_ms=now,
            policy=job["misfire_policy"], max_lateness_s=job["max_lateness_s"],
            paused=job["paused"],
        )
        if verdict.decision == "missed_caught_up":
            lane = self.catch_up.setdefault(part, CatchUpLane(CATCH_UP_PER_JOB_S))
            turn = lane.turn(job_id, slot, due_ms(job, slot), now)
            if turn is not None:  # decided again at its turn, prepared again then (memory)
                index.set(job_id, slot, turn)
                return
        self.decide(part, job, slot, verdict, self.clock(), ready=ready)
        schedule_next(index, job, ready.following)
        if ready.following is None and job["delete_after_completion"]:
            self.last_slot_decided(part, job_id, ready.fid, verdict.runs)

    # -- completed jobs ------------------------------------------------------------------------
    def last_slot_decided(self, part: int, job_id: str, fid: str, runs: bool) -> None:
        """A job that asked to be deleted once completed had its last slot decided here: a slot
        sent to run deletes it when its outcome is on the ledger (``slot_decided``), not now, so
        the reconciler can still re-drive or expire a lost run of it (it reads the job). A slot
        decided without a run (its ledger record is produced already), or already recorded
        (decided before a takeover, or the same one-off again after an update), deletes it now."""
        if not runs or self.outcome_recorded(part, fid):
            self.delete_completed(part, job_id)
        else:
            self.completing[fid] = (part, job_id)

    def slot_decided(self, fid: str) -> None:
        """The executor's outcome of a slot is on the ledger (acknowledged): the reconciler stops
        waiting for it, and a job whose last slot it was is deleted if it asked to be. Called
        in-process: jobs, fired and ledger are co-partitioned, so the executor that recorded it
        is this worker's. Why not read the ledger back (an agent on ``cronstream.ledger``, as
        before): that read every run's record a second time, decoded by faust one record per
        event-loop turn, to learn what this process already knew. A decision recorded anywhere
        else (a previous owner, a zombie) is found by the reconciler's sweep in the done table
        (``recorded``) and by a takeover (``Partitions.take_completed``)."""
        self.reconciler.resolve(fid)
        self.decision_recorded(fid)

    def decision_recorded(self, fid: str) -> None:
        """A slot's decision is recorded: the last slot of a job to delete?"""
        if self.completing:
            found = self.completing.pop(fid, None)
            if found is not None:
                self.delete_completed(*found)

    def delete_completed(self, part: int, job_id: str) -> None:
        """Delete a completed job as the API's DELETE does: a tombstone on ``cronstream.jobs``,
        which this worker's ``apply_jobs``, the API's view and the table's changelog all read.
        Not if the job changed since so that a slot is owed again (an update is indexed), or no
        longer asks for it, or the partition moved (its new owner decides)."""
        index = self.partitions.indexes.get(part)
        raw = self.jobs.get_in(part, job_id.encode())
        if index is None or raw is None or job_id in index:
            return
        job = codec().decode(raw)
        if not job["delete_after_completion"]:
            return
        self.emitter.produce(JOBS, job_id, None, part)
        metrics.JOBS_DELETED_COMPLETED.inc()
        log.info("job %s tenant %s completed: deleted (delete_after_completion)", job_id,
                 job["tenant"])

    def decide(self, partition: int, job: dict[str, Any], slot: int,
               verdict: misfire.SlotDecision, now: int, redrives: int = 0,
               ready: Prepared | None = None) -> None:
        """Emit one slot's decision: a fired record to run it, or a ledger entry if it won't.
        ``ready`` is the slot's preparation, whose fire id and done check it reuses."""
        fid = ready.fid if ready is not None else schedule.fire_id(job["job_id"], slot)
        if redrives == 0:
            done = (ready.done if ready is not None and ready.done_still_known()
                    else self.already_done(partition, fid))
            if done:
                return  # decided and run before a takeover: deciding again could only contradict
        self._uncounted[verdict.decision] = self._uncounted.get(verdict.decision, 0) + 1
        if verdict.runs:
            self.emit_fired(partition, job, fid, slot, verdict.decision, now, redrives,
                            ready.frozen if ready is not None and not redrives else None)
        else:
            self.emit_ledger(partition, job, fid, slot, verdict.decision, verdict.reason,
                             verdict.lateness_ms, now)
            log.debug("slot %s of job %s tenant %s partition %d: %s (%s)", fid, job["job_id"],
                     job["tenant"], partition, verdict.decision, verdict.reason)

    def count(self) -> None:
        """Add the slots decided and reached since the last call to their metrics
        (``cronstream_slots_decided_total``, ``cronstream_slots_reached_total``): once a round
        rather than once a slot, because an increment takes a lock (2.4 µs of the ≈ 8 µs a
        prepared slot cost in a spike's second)."""
        for decision, n in self._uncounted.items():
            metrics.SLOTS_DECIDED.labels(decision).inc(n)
            self.decided += n
        self._uncounted.clear()
        self.reached_at_due += self._uncounted_reached["at_due"]
        for prepared, n in self._uncounted_reached.items():
            if n:
                metrics.SLOTS_REACHED.labels(prepared).inc(n)
                self._uncounted_reached[prepared] = 0

    def done_mark(self, partition: int, fid: str) -> bytes | None:
        """The slot's mark in the executor's done table, co-partitioned with the jobs
        (``cronstream.fired``): its outcome, or an email's intent, or None."""
        return self.runs.done_mark(partition, fid)

    def already_done(self, partition: int, fid: str) -> bool:
        return self.done_mark(partition, fid) is not None

    def outcome_recorded(self, partition: int, fid: str) -> bool:
        """Whether the executor put the slot's outcome on the ledger (its done mark follows the
        ledger's acknowledgement). An email's intent mark is not one: its send may have begun,
        and only the executor, reading the record again, records it as ``unknown``."""
        return self.done_mark(partition, fid) not in (None, INTENT)

    def _outcome_recorded_for(self, item: Pending) -> bool:
        return item.partition in self.partitions.indexes and self.outcome_recorded(item.partition,
                                                                        item.fire_id)

    def emit_fired(self, partition: int, job: dict[str, Any], fid: str, slot: int,
                   decision: str, now: int, redrives: int = 0,
                   frozen: tuple[bytes, bytes] | None = None, asked_ms: int | None = None) -> None:
        """Produce the slot's fired record; ``frozen`` is its preparation's (same slot, job and
        redrives), else it is encoded now; ``asked_ms``: a backfill's request time."""
        asked = now if decision in ASKED_FOR else None
        value = fired_template().join(
            frozen or fired_frozen(job, fid, slot, redrives, asked, asked_ms),
            self._run_of(now, decision))
        self.emitter.produce(FIRED, job["job_id"], value, partition)
        self.reconciler.expect(Pending(fid, job["job_id"], partition, slot, now,
                                       lateness_bound_ms(job), redrives))

    def _run_of(self, now: int, decision: str) -> bytes:
        """The encoding of a fired record's last-moment fields: a spike's slots share it,
        millisecond by millisecond, so it is encoded once for all of them."""
        varying = (now, decision, self.epoch)
        if varying != self._varying:
            self._varying, self._run = varying, fired_template().encode_run(
                {"fired_ms": now, "decision": decision, "epoch": self.epoch})
        return self._run

    def emit_ledger(self, partition: int, job: dict[str, Any], fid: str, slot: int,
                    decision: str, reason: str | None, lateness_ms: int, now: int) -> None:
        entry = job_entry(fire_id=fid, job=job, nominal_ms=slot, decision=decision,
                          reason=reason, lateness_ms=lateness_ms, epoch=self.epoch,
                          outcome="not_run", completed_ms=now)
        self.emitter.produce(LEDGER, fid, codec().encode("LedgerEntry", entry), partition)
        self.slot_decided(fid)  # as the ledger's reader did: nothing waits for it any more

    # -- commands ------------------------------------------------------------------------------
    def command(self, partition: int, cmd: dict[str, Any]) -> None:
        raw = self.jobs.get_in(partition, cmd["job_id"].encode())
        if raw is None:
            log.warning("command %s %s for unknown job %s tenant %s ignored", cmd["command"],
                        cmd["request_id"], cmd["job_id"], cmd["tenant"])
            return
        job = codec().decode(raw)
        now = self.clock()
        if cmd["command"] == "trigger":
            slot = cmd["requested_ms"]
            self.emit_fired(partition, job, schedule.fire_id(job["job_id"], slot), slot,
                            "triggered", now)
        elif cmd["command"] == "backfill":
            until = min(cmd["to_ms"], now)
            for slot in schedule.slots_between(job["schedule"], job["job_id"],
                                               cmd["from_ms"] - 1, until,
                                               schedule.BACKFILL_LIMIT):
                self.emit_fired(partition, job, schedule.fire_id(job["job_id"], slot), slot,
                                "backfilled", now, asked_ms=cmd["requested_ms"])

    # -- reconciler ----------------------------------------------------------------------------
    def reconcile(self, in_flight: set[str],
                  queues: Mapping[int, ExecutorQueue] | None = None) -> None:
        now = self.clock()
        for catch in self.reconciler.sweep(now, in_flight, queues, self._outcome_recorded_for):
            item = catch.pending
            raw = self.jobs.get_in(item.partition, item.job_id.encode())
            log.warning("reconciler caught %s (job %s partition %d): %s -> %s", item.fire_id,
                        item.job_id, item.partition, catch.reason, catch.action)
            metrics.RECONCILER_CATCHES.labels(catch.action).inc()
            if raw is None or item.partition not in self.partitions.indexes:
                continue
            job = codec().decode(raw)
            if catch.action == "redrive":
                verdict = misfire.SlotDecision("fired", catch.reason, now - item.nominal_ms)
                self.decide(item.partition, job, item.nominal_ms, verdict, now, item.redrives)
            else:
                self.emit_ledger(item.partition, job, item.fire_id, item.nominal_ms,
                                 "expired_stale", catch.reason, now - item.nominal_ms, now)
        self.count()

    async def maybe_mark(self) -> bool:
        """Persist fired-through marks once the records before them are acknowledged; False
        when they were not all acknowledged within ``MARK_FLUSH_S``, and the marks wait for the
        next round. Why bounded: the punctuator awaits this, so a flush waiting for records of
        a partition whose leader died (until the controller moves it: 12 s after a controller
        kill on three nodes, docs/testing.md) stopped every partition's firing that long."""
        if time.monotonic() - self._last_mark < MARK_EVERY_S or not self.partitions.indexes:
            return False
        self._last_mark = time.monotonic()
        marks = dict(self.partitions.fired_through)
        left = await asyncio.get_running_loop().run_in_executor(
            None, self.emitter.flush, MARK_FLUSH_S)
        if left:
            log.info("fired-through marks not written: %d records of the scheduler not "
                     "acknowledged after %.1fs (a partition without a leader?); next round in "
                     "%.0fs (epoch %d)", left, MARK_FLUSH_S, MARK_EVERY_S, self.epoch)
            return False
        for part, through in marks.items():
            if part in self.partitions.indexes:
                progress.write_mark(self.emitter, part, through, self.epoch, self.worker_id)
        return True


class Burst:
    """Where a burst's time went: its wall time against the CPU of the whole process, of the
    deciding thread, and of the deciding rounds alone. The thread's CPU outside the rounds is
    the rest of the event loop (faust handing over fetched records); wall time beyond the
    process's CPU is time the box's other processes had the cores."""

    def __init__(self, decided: int, reached_at_due: int) -> None:
        self.decided, self.reached_at_due = decided, reached_at_due
        self.wall, self.process, self.thread = time.monotonic(), time.process_time(), time.thread_time()
        self.in_rounds = 0.0

    def round(self, decide: Callable[[], bool]) -> bool:
        started = time.thread_time()
        try:
            return decide()
        finally:
            self.in_rounds += time.thread_time() - started

    def report(self, decided: int, reached_at_due: int) -> str:
        return (f"{decided - self.decided} slots decided ({reached_at_due - self.reached_at_due} "
                f"not prepared ahead) in {time.monotonic() - self.wall:.3f} s "
                f"wall; CPU: process {time.process_time() - self.process:.3f} s, deciding thread "
                f"{time.thread_time() - self.thread:.3f} s, its deciding rounds "
                f"{self.in_rounds:.3f} s")


def register(rt: Runtime, runs: Runs, deciding: Gate, window: ImportWindow) -> ScheduleState:
    """The schedule stream's sub-topology on ``rt``'s app: the jobs table and its agents, and the
    punctuators that decide due slots and reconcile; ``runs`` is the executor's side of it,
    ``deciding`` the gate it holds while it decides a burst (``streams.scheduling.priority``),
    and ``window`` the bulk importer's, given back as its copies are applied."""
    app, health, region = rt.app, rt.health, rt.region
    jobs_topic = rt.topic(JOBS)
    commands_topic = rt.topic(JOB_COMMANDS)
    jobs_table = rt.table(JOBS_TABLE)
    state = ScheduleState(jobs_table, runs, bootstrap=rt.settings.bootstrap, worker_id=rt.worker_id,
                          reconciler_lag_ms=int(rt.settings.reconciler_lag_s * 1000))

    @jobs_table.on_recover
    async def _on_jobs_recovered() -> None:
        state.generation = app.consumer_generation_id
        state.under_region(region.holds() or 0)
        assigned = {tp.partition for tp in app.consumer.assignment() if tp.topic == JOBS.name}
        changelog = JOBS_TABLE.changelog(APP_ID)
        standby_parts = {tp.partition for tp in app.assignor.assigned_standbys()
                         if tp.topic == changelog}
        state.rebuild(assigned, standby_parts)
        gc.collect()  # then what recovery built and still lives is kept out of every later
        gc.freeze()  # collection (streams.worker: full collections walked it for nothing)
        health.recovered, health.partitions = True, sorted(assigned)
        metrics.REBALANCES.inc()
        metrics.ASSIGNED.set(len(assigned))
        ready = rt.ready_file()
        ready.parent.mkdir(parents=True, exist_ok=True)
        ready.write_text(f"{state.epoch} {sorted(assigned)}\n")

    jobs_table.on_applied = state.partitions.apply_changelog

    @app.timer(interval=0.1, name=f"{__name__}.warm_up_standbys")
    async def warm_up_standbys() -> None:
        """Punctuator: read what a standby partition's RocksDB held before it became a standby
        into its warm index, a step at a time (``streams.scheduling.warm_index``), never during
        a burst; and export how far the standbys trail their changelogs."""
        if deciding.is_open:
            state.partitions.warm_up()
        try:  # a gauge: an exception in a faust timer stops the whole worker
            for changelog, records in standbys.behind(app).items():
                metrics.STANDBY_BEHIND.labels(changelog).set(records)
        except Exception:
            log.exception("standby lag not measured (epoch %d)", state.epoch)

    @app.on_partitions_revoked.connect
    async def _on_revoked(app: Any, revoked: set[Any], **kwargs: Any) -> None:
        health.recovered = False  # until the tables of the next assignment are restored
        for tp in revoked:
            if tp.topic == JOBS.name:
                state.drop(tp.partition)

    @app.agent(jobs_topic, name=f"{__name__}.apply_jobs")
    async def apply_jobs(stream: Any) -> Any:
        """Materialise job definitions into the table and the due index (its only writer)."""
        async for event in stream.events():
            job_id = event.key.decode()
            part = event.message.partition
            if imported(event.headers):
                window.applied()
                if stale(jobs_table.get_in(part, event.key), event.value):
                    log.info("import of job %s (partition %d offset %d) is older than its "
                             "current definition; not applied", job_id, part,
                             event.message.offset)
                    continue
            if event.value is None:
                jobs_table.pop(event.key, None)
                index = state.partitions.indexes.get(part)
                if index is not None:
                    index.remove(job_id)
                continue
            jobs_table[event.key] = event.value
            state.partitions.track(part, codec().decode(event.value), live=True)

    @app.agent(commands_topic, name=f"{__name__}.apply_job_commands")
    async def apply_job_commands(stream: Any) -> Any:
        """trigger / backfill: the job's owner emits the slots, with its epoch (once its
        region's lease holds: a region without it decides nothing, docs/regions.md)."""
        async for event in stream.events():
            state.under_region(await region.held())
            state.command(event.message.partition, codec().decode(event.value))

    @app.timer(interval=FIRE_TICK_S, name=f"{__name__}.fire_due")
    async def fire_due() -> None:
        """Punctuator: decide due slots, then (about once a second) persist progress marks. In
        a spike it keeps deciding round after round, yielding to the event loop in between, so
        the slots due now come before running the ones already fired; a backlog of late slots
        (after an outage) goes at the tick's pace instead. A slot due before the next tick is
        waited for and decided at its moment: the tick alone would have added up to 50 ms (25
        on average) to every fire. Not while the region's lease does not hold: the slots of
        the gap are decided by their misfire policies when it does, here or in the region
        promoted instead (docs/regions.md)."""
        health.tick()
        if (held := region.holds()) is None:
            return
        state.under_region(held)
        await decide_due(state, deciding, health.tick)
        await state.maybe_mark()
        wait_ms = -1 if state.next_due_ms is None else state.next_due_ms - state.clock()
        if 0 <= wait_ms < FIRE_TICK_S * 1000:
            await asyncio.sleep((wait_ms + 1) / 1000)  # +1: woken a hair early, nothing is due yet
            await decide_due(state, deciding, health.tick)

    @app.timer(interval=5.0, name=f"{__name__}.reconcile")
    async def reconcile() -> None:
        """Punctuator: the cleanup crew, trailing the scheduler by the reconciler's lag (while
        the region's lease holds, as the scheduler)."""
        if region.holds() is not None:
            await sweep(state, runs)

    return state


async def decide_due(state: ScheduleState, deciding: Gate, tick: Callable[[], None]) -> None:
    """Decide what is due; a burst is decided round after round while the executor waits
    (``streams.scheduling.priority``), the loop yielded and the worker's health ticked between."""
    burst = Burst(state.decided, state.reached_at_due)
    if burst.round(state.fire_due):
        with deciding.held(), collections_deferred():
            while burst.round(state.fire_due):
                tick()
                await asyncio.sleep(0)
        log.info("burst: %s", burst.report(state.decided, state.reached_at_due))


async def sweep(state: ScheduleState, runs: Runs) -> None:
    """One round of the cleanup crew.

    The ends of the fired partitions, which tell a slot still queued for the executor from one
    it went past, are asked of the broker before the executor's position is read. Why not the
    consumer's high watermark: it is only as recent as the partition's last fetch, and while a
    bulk delete of a million jobs filled the consumer's fetches the survivor of a mid-spike
    kill took 52 queued slots for lost (``bench.failover --spike``)."""
    parts = sorted(state.partitions.indexes)
    try:
        ends = await asyncio.get_running_loop().run_in_executor(
            None, admin.end_offsets, state.bootstrap, [(FIRED.name, p) for p in parts])
    except Exception as exc:  # the broker did not answer: the sweep waits for the next tick
        log.warning("reconciler sweep skipped: the ends of %s partitions %s unknown (%s; "
                    "epoch %d)", FIRED.name, parts, exc, state.epoch)
        return
    state.reconcile(runs.in_flight_ids(), runs.queues({p: ends[(FIRED.name, p)] for p in parts}))
