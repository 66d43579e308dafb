"""Emission: how the scheduler's decisions leave it, a section of ``ScheduleState``
(``streams.scheduling.deciding``).

A slot sent to run becomes a record on ``cronstream.fired`` (and a pending slot for the
reconciler), one decided without a run an entry on ``cronstream.ledger``; about once a second the
fired-through marks go to ``cronstream.scheduler-progress`` once the records before them are
acknowledged. One producer per worker, lingering ``FIRED_LINGER_MS`` (below). Every record
carries the epoch the state decides under, so a zombie's records can be told apart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from streams.ledger import job_entry
from streams.records import Job
from streams.runtime.codec import codec
from streams.runtime.emit import Emitter
from streams.scheduling import progress
from streams.scheduling.partitions import Partitions
from streams.scheduling.reconciler import Pending, Reconciler
from streams.scheduling.slots import fired_frozen, fired_template, lateness_bound_ms
from streams.topology import FIRED, LEDGER

log = logging.getLogger(__name__)

# slots a user asked to run now: their run is due by max_lateness_s after the asking, not the slot
ASKED_FOR = frozenset({"triggered", "backfilled"})
MARK_EVERY_S = 1.0
MARK_FLUSH_S = 0.5  # the most a mark round waits for the records before it (maybe_mark)
# How long the scheduler's producer gathers records into a batch. Why not librdkafka's 5 ms
# (the other emitters'): the broker's cost of a spike is per batch more than per record. Two
# producers sending a 100k-slot second at 5 ms took the broker 0.62 s of CPU, on the two cores
# the workers decide on, and at 50 ms 0.15 s (``bench.batching``: medians of 5 rounds on a fresh
# broker). A record's CreateTime, its fire time, is still the moment it was decided; what waits
# up to 50 ms more is its append, and in a burst its run waits a second anyway
# (streams.handoff.Gate).
FIRED_LINGER_MS = 50


class Emission:
    """The emitting section of ``ScheduleState``: the attributes below are the state's."""

    bootstrap: str
    worker_id: str
    epoch: int
    partitions: Partitions
    reconciler: Reconciler
    _emitter: Emitter | None
    _varying: tuple[int, str, int] | None
    _run: bytes
    _last_mark: float
    slot_decided: Callable[[str], None]

    @property
    def emitter(self) -> Emitter:
        if self._emitter is None:
            self._emitter = Emitter(self.bootstrap, f"scheduler-{self.worker_id}",
                                   **{"linger.ms": FIRED_LINGER_MS})
        return self._emitter

    def emit_fired(self, partition: int, job: Job, fid: str, slot: int,
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

    def emit_ledger(self, partition: int, job: Job, fid: str, slot: int,
                    decision: str, reason: str | None, lateness_ms: int, now: int) -> None:
        entry = job_entry(fire_id=fid, job=job, nominal_ms=slot, decision=decision,
                          reason=reason, lateness_ms=lateness_ms, epoch=self.epoch,
                          outcome="not_run", completed_ms=now)
        self.emitter.produce(LEDGER, fid, codec().encode("LedgerEntry", entry), partition)
        self.slot_decided(fid)  # as the ledger's reader did: nothing waits for it any more

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
