"""Catch-up pacing: when each missed slot of a ``fire_all`` job may run, and how far its
partition's fired-through mark may go while some wait. Pure.

Why per job: pacing protects what a job calls from a flood of its own missed slots (a job due
every second, down for an hour, owes 3,600 runs). A budget shared by the partition did not do
that better, and it made every job wait behind the others: after a worker died in the middle
of a 100k-slot spike, its survivor gave the 28,500 spike slots the victim had not fired their
turns at 200 a second per partition, and the jobs due every second on those partitions, whose
next missed slot queued behind all of them each time, fired again only 61 s after the kill
(``bench.failover --spike``). Now a job's first missed slot runs at once and each next one
``1 / rate`` after it; the fired topic and the executor take a spike's worth at once anyway.

Why a waiting slot is given its turn once: put back in the due index a few milliseconds later
to be decided again, the same slots were decided round after round, every scheduler tick spent
its whole budget on them, and the executor on the same event loop starved. Now a slot that must
wait is indexed at its turn and decided twice: once to find it must wait, once at its turn.

Why the mark is held: the fired-through mark says every slot due by it was decided, and a
worker taking the partition over resumes from it. A slot waiting for its turn is indexed at the
turn, later than it fell due, so the index alone would let the mark pass it, and a crash before
its turn would lose it. The mark stays below the earliest slot still waiting (``mark_bound``),
and a partition given up puts its waiting slots back at their due times (``waiting``).
"""

from __future__ import annotations

import heapq
import math


class CatchUpLane:
    """One partition's catch-up pacing: each job's missed slots ``per_job_per_s`` a second."""

    def __init__(self, per_job_per_s: float) -> None:
        self.spacing_ms = 1000 / per_job_per_s
        self.ran: dict[str, int] = {}  # job id -> when its last missed slot was let go
        self.turns: dict[str, tuple[int, int]] = {}  # job id -> (slot, due) waiting for a turn
        self._dues: list[tuple[int, str, int]] = []  # heap of (due, job id, slot) in ``turns``
        self.last_turn = 0  # the latest turn given

    def turn(self, job_id: str, slot_ms: int, due_ms: int, now_ms: int) -> int | None:
        """When the missed slot ``slot_ms`` of ``job_id`` (due at ``due_ms``) may run: None for
        now (the job's previous missed slot ran long enough ago, or this is the slot's turn
        come back), else the moment of its turn, at which the caller indexes it again."""
        waiting = self.turns.pop(job_id, None)
        previous = self.ran.get(job_id)
        at = now_ms if previous is None else math.ceil(previous + self.spacing_ms)
        if (waiting is not None and waiting[0] == slot_ms) or at <= now_ms:
            self.ran[job_id] = now_ms
            return None
        self.turns[job_id] = (slot_ms, due_ms)
        heapq.heappush(self._dues, (due_ms, job_id, slot_ms))
        self.last_turn = max(self.last_turn, at)
        return at

    def mark_bound(self, now_ms: int, nothing_due: bool) -> int | None:
        """The latest fired-through mark the partition may have now (None: no bound): below the
        earliest slot still waiting. ``nothing_due``: the partition's due index has nothing due
        at ``now_ms`` left, so no job has a missed slot left but those waiting."""
        if nothing_due and now_ms >= self.last_turn:
            # every turn has come and every slot due was decided: what is left in ``turns`` is
            # a job changed or deleted while its slot waited (re-indexed, or gone)
            self.turns.clear()
            self._dues.clear()
            self.ran.clear()
        dues, turns = self._dues, self.turns
        while dues and turns.get(dues[0][1]) != (dues[0][2], dues[0][0]):
            heapq.heappop(dues)  # its turn was used
        return dues[0][0] - 1 if dues else None

    def waiting(self) -> dict[str, tuple[int, int]]:
        """Job id -> (slot, due) of the slots still waiting for their turns."""
        return dict(self.turns)
