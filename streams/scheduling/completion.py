"""Completion: what becomes of a slot after it was sent to run, a section of ``ScheduleState``
(``streams.scheduling.deciding``).

Its outcome reaches the scheduler in-process (``slot_decided``, through ``streams.handoff``), and
the reconciler stops waiting for it; a job that asked to be deleted once completed is deleted
when its last slot's outcome is on the ledger; the done table, read through ``Runs``, tells a
slot already run (or an email's send begun) from one never run; and a slot still without an
outcome after the reconciler's lag is re-driven or expired (``reconcile``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from streams.handoff import ExecutorQueue, Runs
from streams.runtime import metrics
from streams.runtime.codec import codec
from streams.runtime.emit import Emitter
from streams.scheduling import misfire
from streams.scheduling.partitions import Partitions
from streams.scheduling.reconciler import Pending, Reconciler
from streams.scheduling.slots import JobStore
from streams.topology import BEGUN, JOBS

log = logging.getLogger(__name__)


class Completion:
    """The completing section of ``ScheduleState``: the attributes below are the state's."""

    jobs: JobStore
    runs: Runs
    clock: Callable[[], int]
    partitions: Partitions
    reconciler: Reconciler
    completing: dict[str, tuple[int, str]]
    emitter: Emitter
    decide: Callable[..., None]
    emit_ledger: Callable[..., None]
    count: Callable[[], None]

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

    def done_mark(self, partition: int, fid: str) -> bytes | None:
        """The slot's mark in the executor's done table, co-partitioned with the jobs
        (``cronstream.fired``): its outcome, or an email's intent, or None."""
        return self.runs.done_mark(partition, fid)

    def already_done(self, partition: int, fid: str) -> bool:
        return self.done_mark(partition, fid) is not None

    def outcome_recorded(self, partition: int, fid: str) -> bool:
        """Whether the executor put the slot's outcome on the ledger (its done mark follows the
        ledger's acknowledgement). An email's intent mark is not one: its send may have begun,
        and only the executor, reading the record again, records it as ``unknown``; nor is a
        refused attempt's mark (``REFUSED``: the executor runs it again)."""
        return self.done_mark(partition, fid) not in (None, *BEGUN)

    def _outcome_recorded_for(self, item: Pending) -> bool:
        return item.partition in self.partitions.indexes and self.outcome_recorded(item.partition,
                                                                        item.fire_id)

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
