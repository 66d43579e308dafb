"""Catch-up pacing: the turns of a partition's missed slots (``fire_all``), and how far its
fired-through mark may go while some wait for theirs. Pure.

Why turns, reserved once: a missed slot that must wait was put back in the due index a few
milliseconds later, to be decided again and (the second's budget spent) put back again. After a
worker died in the middle of a 100k-slot spike, its survivor had 27,030 such slots; every tick
of the scheduler spent its whole budget (0.1 s, on a 50 ms tick) putting the same slots back,
and the executor on the same event loop took up some 65 records a second
(``bench.failover --spike``). Now a slot that must wait is given the moment of its turn from the
partition's token bucket (``streams.pacing.TokenBucket.reserve``) and indexed at that moment: it
is decided twice, once to find it is late and once when its turn comes.

Why the mark is held: the fired-through mark says every slot due by it was decided, and a
worker taking the partition over resumes from it. A slot waiting for its turn is indexed at the
turn, later than it fell due, so the index alone would let the mark pass it, and a crash before
its turn would lose it. The mark stays below the earliest slot still waiting (``mark_bound``),
and a partition given up puts its waiting slots back at their due times (``waiting``).
"""

from __future__ import annotations

import heapq
import math

from streams.pacing import TokenBucket


class CatchUpLane:
    """One partition's catch-up pacing: ``rate_per_s`` missed slots a second, in turns."""

    def __init__(self, rate_per_s: float) -> None:
        self.bucket = TokenBucket(rate_per_s, rate_per_s)
        self.turns: dict[str, tuple[int, int]] = {}  # job id -> (slot, due) waiting for a turn
        self._dues: list[tuple[int, str, int]] = []  # heap of (due, job id, slot) in ``turns``
        self.last_turn = 0  # the latest turn reserved

    def turn(self, job_id: str, slot_ms: int, due_ms: int, now_ms: int) -> int | None:
        """When the missed slot ``slot_ms`` of ``job_id`` (due at ``due_ms``) may run: None for
        now (a turn is free, or this is the slot's reserved turn come back), else the moment of
        the turn now reserved for it, at which the caller indexes it again."""
        waiting = self.turns.pop(job_id, None)
        if waiting is not None and waiting[0] == slot_ms:
            return None
        wait_s = self.bucket.reserve(now_ms / 1000)
        if wait_s <= 0:
            return None
        self.turns[job_id] = (slot_ms, due_ms)
        heapq.heappush(self._dues, (due_ms, job_id, slot_ms))
        at = now_ms + math.ceil(wait_s * 1000)
        self.last_turn = max(self.last_turn, at)
        return at

    def mark_bound(self, now_ms: int, nothing_due: bool) -> int | None:
        """The latest fired-through mark the partition may have now (None: no bound): below the
        earliest slot still waiting. ``nothing_due``: the partition's due index has nothing due
        at ``now_ms`` left."""
        if nothing_due and now_ms >= self.last_turn:
            # every turn has come and every slot due was decided: what is left in ``turns`` is
            # a job changed or deleted while its slot waited (re-indexed, or gone)
            self.turns.clear()
            self._dues.clear()
        dues, turns = self._dues, self.turns
        while dues and turns.get(dues[0][1]) != (dues[0][2], dues[0][0]):
            heapq.heappop(dues)  # its turn was used
        return dues[0][0] - 1 if dues else None

    def waiting(self) -> dict[str, tuple[int, int]]:
        """Job id -> (slot, due) of the slots still waiting for their turns."""
        return dict(self.turns)
