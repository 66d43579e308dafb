"""Deciding: the worker's in-memory view of its partitions, and the deciding of their due slots.

Slots due within ``PREPARE_AHEAD_MS`` (10 s) are staged and prepared ahead (job read and decoded,
following slot and fire id computed, done table checked, the fired record encoded but for the
fields only known when it fires) in the time before they fall due, so in a top-of-minute
spike's own second a slot costs little more than its produce.

Why a punctuator (``streams.scheduling.agents``) and not a table write per fire: faust table
writes cap around 5k/s; the only per-fire state is the in-memory due index, and what a restart
needs (where to resume) is the per-partition progress mark. Duplicates after a crash are
harmless because fire ids are deterministic (``job_id@nominal_time``) and the executor dedupes
them. Every record carries the consumer-group generation as its epoch, so a zombie's records can
be told apart (the executor rejects them).

``ScheduleState`` keeps owning partitions, firing and preparing here; its other sections are
modules of their own, mixed in: ``emission`` (fired and ledger records, progress marks),
``completion`` (outcomes, completed jobs, the reconciler's sweep) and ``commands`` (trigger,
backfill).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from streams.handoff import Runs
from streams.records import Job
from streams.runtime import metrics
from streams.runtime.clock import now_ms
from streams.runtime.codec import codec
from streams.runtime.emit import Emitter
from streams.runtime.region import fence_epoch
from streams.scheduling import fired_tail, misfire, progress, quiet_hours, schedule
from streams.scheduling.catch_up import CatchUpLane
from streams.scheduling.commands import Commands
from streams.scheduling.completion import Completion
from streams.scheduling.due_index import DueIndex
from streams.scheduling.emission import Emission
from streams.scheduling.partitions import Partitions
from streams.scheduling.reconciler import DEFAULT_LAG_MS, Pending, Reconciler
from streams.scheduling.slots import (
    JobStore,
    Prepared,
    due_ms,
    fired_template,
    prepare,
    schedule_next,
)
from streams.topology import FIRED

log = logging.getLogger(__name__)

FIRE_ROUND = 500  # slots popped per partition per round
FIRE_BUDGET_S = 0.1  # time one tick may spend deciding before yielding the event loop
CATCH_UP_PER_JOB_S = 20  # a job's missed slots run a second, in turns (streams.scheduling.catch_up)
PREPARE_AHEAD_MS = 10_000  # how long before its due time a slot may be prepared
PREPARE_BUDGET_S = 0.03  # time one tick may spend preparing, after firing what is due
PREPARED_MAX = 200_000  # per worker: bounds the memory of a far larger spike (~1 KiB each)


def quiet_slot(window: quiet_hours.QuietHours, job: Job, slot: int, now: int,
               verdict: misfire.SlotDecision) -> misfire.SlotDecision | int:
    """A slot the misfire policy sends to run (``verdict``), of a text with quiet hours: the
    moment to decide it again when they hold it (it is indexed there: the window's end), else
    its decision. Inside them, ``quiet_hours.decide``: expired at once (``skip``, or the
    window ends past the slot's deadline), else held. Outside them, a slot that fell due in a
    window now ended and was held through it runs as ``held_quiet_hours``, with the reason;
    any other runs as the policy said. Pure: ``now`` is the scheduler's clock."""
    run_by = slot + job["max_lateness_s"] * 1000
    skip = job["misfire_policy"] == "skip"
    quiet = quiet_hours.decide(window, now, run_by, skip)
    if quiet.verdict is quiet_hours.Verdict.HOLD and quiet.until_ms is not None:
        return quiet.until_ms
    if quiet.verdict is quiet_hours.Verdict.EXPIRE:
        return misfire.SlotDecision("expired_stale", quiet.reason, verdict.lateness_ms)
    held = quiet_hours.held_until_ms(window, due_ms(job, slot), now, run_by, skip)
    if held is None:
        return verdict
    return misfire.SlotDecision(quiet_hours.HELD, quiet_hours.held_reason(window, held),
                                verdict.lateness_ms)


class ScheduleState(Emission, Completion, Commands):
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

    # -- firing and preparing -------------------------------------------------------------------
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
        window = quiet_hours.window_of(job["target"]) if verdict.runs else None
        if window is not None:
            quiet = quiet_slot(window, job, slot, now, verdict)
            if isinstance(quiet, int):  # held: indexed at the window's end, decided then
                index.set(job_id, slot, quiet)
                log.debug("slot %s of job %s tenant %s partition %d: held by quiet hours "
                          "until %d", ready.fid, job_id, job["tenant"], part, quiet)
                return
            verdict = quiet
        self.decide(part, job, slot, verdict, self.clock(), ready=ready)
        schedule_next(index, job, ready.following)
        if ready.following is None and job["delete_after_completion"]:
            self.last_slot_decided(part, job_id, ready.fid, verdict.runs)

    def decide(self, partition: int, job: Job, slot: int,
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
