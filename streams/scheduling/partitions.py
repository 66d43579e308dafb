"""The partitions a worker owns, and the ones it keeps warm as a standby.

For each owned partition: its due index (``streams.scheduling.due_index``), its fired-through
mark (how far every slot is decided) and, just after a takeover, what its previous owner fired
past its mark (``streams.scheduling.takeover``). For each standby partition: a warm index kept
current from the jobs changelog (``streams.scheduling.warm_index``), adopted at a takeover so a
million jobs are not read again. Deciding the due slots is ``streams.scheduling.deciding``'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from streams.runtime.codec import codec
from streams.scheduling import fired_tail, progress
from streams.scheduling.due_index import DueIndex
from streams.scheduling.reconciler import Reconciler
from streams.scheduling.slots import JobStore, index_job
from streams.scheduling.takeover import Takeover
from streams.scheduling.warm_index import WarmIndex

log = logging.getLogger(__name__)


class Partitions:
    def __init__(self, jobs: JobStore, *, bootstrap: str = "",
                 load_marks: Callable[[str], dict[int, int]] = progress.load_marks,
                 read_fired: Callable[[str, dict[int, int]], dict[int, dict[str, int]]] = fired_tail.read,
                 ) -> None:
        self.jobs = jobs  # the jobs table (a faust table in a worker)
        self.bootstrap = bootstrap
        # where a takeover resumes: the progress marks, and what was fired past them
        self.load_marks, self.read_fired = load_marks, read_fired
        self.indexes: dict[int, DueIndex] = {}
        self.warm: dict[int, WarmIndex] = {}  # standby partitions
        self.fired_through: dict[int, int] = {}
        self.takeover = Takeover()  # slots a previous owner fired past its mark
        # jobs found with no slot owed that asked to be deleted once completed (``take_completed``)
        self.completed: list[tuple[int, str]] = []

    def track(self, partition: int, job: dict[str, Any], live: bool = False) -> None:
        """(Re)index a job from the point its slots are still owed a decision.

        A record arriving now (``live``) is owed every slot since it was written, even if the
        partition's fired-through mark is already later (a job due "now" would otherwise be
        skipped silently). After a takeover, slots up to the previous owner's mark were decided
        by it for every job it had read, so those resume from the mark."""
        index = self.indexes.get(partition)
        if index is not None:
            if live:
                index_job(index, job, None, owed=index.next_slot(job["job_id"]))
            else:
                index_job(index, job, self.fired_through.get(partition, 0))
            if not live and job["delete_after_completion"] and job["job_id"] not in index:
                # its last slot was decided before this worker took the partition
                self.completed.append((partition, job["job_id"]))

    def untrack(self, partition: int, job_id: str) -> None:
        """A job deleted: its slots are owed nothing more."""
        index = self.indexes.get(partition)
        if index is not None:
            index.remove(job_id)

    def take_completed(self) -> list[tuple[int, str]]:
        """The completed jobs to delete found since the last call (``track`` at a takeover)."""
        found, self.completed = self.completed, []
        return found

    def revoked(self, assigned: set[int]) -> list[int]:
        """The partitions this worker owns that ``assigned`` no longer gives it."""
        return [part for part in self.indexes if part not in assigned]

    def adopt(self, assigned: set[int], standbys: set[int], epoch: int) -> None:
        """After recovery (revoked partitions released first): index every job of newly
        assigned partitions, adopting a standby's warm index where there is one, from the
        previous owner's fired-through mark and with what it fired past it; keep the standbys'
        indexes warm and forget the rest."""
        for part in list(self.warm):
            if part not in assigned and part not in standbys:
                del self.warm[part]
        for part in standbys - assigned - set(self.warm):
            self.warm[part] = WarmIndex()  # filled by changelog batches and warm_up_standbys
        new = assigned - set(self.indexes)
        if not new:
            return
        marks = self.load_marks(self.bootstrap)
        started = time.monotonic()
        try:
            fired_before = self.read_fired(self.bootstrap, {p: marks.get(p, 0) for p in new})
        except Exception:  # only spares work: without it those slots are fired again
            log.exception("the fired records of partitions %s since their marks not read; "
                          "their slots fired past the marks are fired again (epoch %d)",
                          sorted(new), epoch)
            fired_before = {}
        tail_s = time.monotonic() - started
        scanned = redone = adopted = 0
        for part in sorted(new):
            warm = self.warm.pop(part, None)
            adopted += warm is not None
            warm = warm or WarmIndex()
            self.indexes[part] = warm.index
            self.fired_through[part] = marks.get(part, 0)
            self.takeover.adopt(part, fired_before.get(part, {}))
            scanned += warm.scan(partial(self.jobs.items_in, part),
                                 lambda _index, raw, part=part: self.track(
                                     part, codec().decode(raw)), limit=None)
            for job_id in warm.stale(self.fired_through[part]):
                raw = self.jobs.get_in(part, job_id.encode())
                if raw is None:
                    warm.index.remove(job_id)
                else:
                    self.track(part, codec().decode(raw))
                redone += 1
        log.info("scheduler took partitions %s (%d from a warm standby index): %d jobs read, "
                 "%d indexed again from the fired-through mark, %d slots found fired past it "
                 "(%.2fs), in %.2fs (epoch %d)", sorted(new), adopted, scanned, redone,
                 sum(map(len, fired_before.values())), tail_s, time.monotonic() - started,
                 epoch)

    def mark(self, part: int, through: int) -> None:
        """Move the partition's fired-through mark up to ``through``, but below any slot the
        previous owner fired that is still to settle (``Takeover.mark_bound``)."""
        through = self.takeover.mark_bound(part, through)
        self.fired_through[part] = max(self.fired_through.get(part, 0), through)

    def settle_previous_fires(self, stop_at: float, reconciler: Reconciler) -> None:
        """Until ``stop_at``, settle the slots reached that a previous owner fired."""
        self.takeover.settle(stop_at, self.indexes, self.jobs, reconciler)

    def release(self, partition: int, waiting: dict[str, tuple[int, int]]) -> None:
        """Revoked: the partition's index stays as a warm one (the next rebuild drops it unless
        the partition is this worker's standby or comes back). ``waiting``: its missed slots
        still waiting for their catch-up turns (job id -> (slot, due)), put back at their due
        times, below any next mark."""
        index = self.indexes.pop(partition, None)
        for job_id, slot in self.takeover.drop(partition):
            if index is not None and job_id not in index:
                index.set(job_id, slot)  # indexed as it was (Takeover.drop)
        if index is not None:
            for job_id, (slot, due) in waiting.items():
                if index.next_slot(job_id) == slot:  # back at its due: below any next mark
                    index.set(job_id, slot, due)
        if index is not None:
            index.detach()
            self.warm[partition] = WarmIndex(index, scan_from=None)

    def apply_changelog(self, events: list[Any]) -> None:
        """Changelog records RocksDB now holds (``GuardedTable.on_applied``): keep the warm
        indexes of their partitions current, as a live job record would."""
        for event in events:
            msg = event.message
            warm = self.warm.get(msg.partition)
            if warm is None:
                continue
            try:
                if msg.value is None:
                    warm.index.remove(msg.key.decode())
                else:
                    index_job(warm.index, codec().decode(msg.value), None)
            except Exception:
                log.exception("jobs changelog partition %d offset %d: not indexed in the warm "
                              "index (it is read again at a takeover)", msg.partition, msg.offset)
                warm.scan_from = b""

    def warm_up(self) -> int:
        """One scan step of the first warm index not yet read whole; returns jobs read."""
        for part, warm in self.warm.items():
            if not warm.complete:
                return warm.scan(partial(self.jobs.items_in, part),
                                 lambda index, raw: index_job(index, codec().decode(raw), None))
        return 0
