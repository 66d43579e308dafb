"""After a takeover: the slots the partition's previous owner fired past its last mark.

Marks are written about once a second, so a worker that dies mid-spike has fired thousands of
slots past its mark. Its successor reads them from the fired topic's tail
(``streams.scheduling.fired_tail``) and leaves them to their records: when it reaches such a slot
it does not fire it again but *settles* it — after the slots due now are fired — by expecting its
decision (the reconciler re-drives one whose record was lost or fenced off) and indexing the job's
following slot. Until then the partition's fired-through mark stays below the earliest such slot,
so a crash before settling loses none. Once the mark passes the latest of them, the partition
asks no more (what is left was fired at another time: a trigger, a re-drive, a changed job).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping

from streams.runtime.codec import codec
from streams.scheduling import schedule
from streams.scheduling.due_index import DueIndex
from streams.scheduling.reconciler import Pending, Reconciler
from streams.scheduling.slots import JobStore, lateness_bound_ms, schedule_next


class Takeover:
    def __init__(self) -> None:
        # partition -> fire id -> fired_ms: fired past the mark by a previous owner, and the
        # latest of those times (once the partition's mark reaches it, none is asked for again)
        self.fired_before: dict[int, dict[str, int]] = {}
        self.until: dict[int, int] = {}
        # partition -> (job id, slot, fired_ms) of such slots reached, settled after the slots
        # due now are fired (``settle``), and the earliest of their slots
        self.to_settle: dict[int, deque[tuple[str, int, int]]] = {}
        self.floor: dict[int, int] = {}

    def adopt(self, part: int, fires: dict[str, int]) -> None:
        """The fire ids (and fired times) the previous owner fired past the mark on ``part``."""
        if fires:
            self.fired_before[part] = fires
            self.until[part] = max(fires.values())

    def claim(self, part: int, job_id: str, slot: int, fid: str | None = None) -> bool:
        """Whether the previous owner fired this slot: if so it is settled later, not fired.
        Asked once per slot reached, and only on a partition just taken over, where no fire id
        is made for the question otherwise (``fid`` is the preparation's, when there is one)."""
        fires = self.fired_before.get(part)
        if not fires:
            return False
        fired_ms = fires.pop(fid or schedule.fire_id(job_id, slot), None)
        if fired_ms is None:
            return False
        self.to_settle.setdefault(part, deque()).append((job_id, slot, fired_ms))
        self.floor[part] = min(slot, self.floor.get(part, slot))
        return True

    def mark_bound(self, part: int, through: int) -> int:
        """How far the partition's fired-through mark may go: below the earliest slot still to
        settle; and once it passes the latest slot the previous owner fired, forget them."""
        floor = self.floor.get(part)
        if floor is not None:  # jobs whose following slots are not indexed yet
            through = min(through, floor - 1)
        if through >= self.until.get(part, through + 1):
            # every slot due by then is decided: what is left was fired at another time
            # (a trigger, a re-drive) or is a job's since changed or deleted
            self.forget(part)
        return through

    def settle(self, stop_at: float, indexes: Mapping[int, DueIndex], jobs: JobStore,
               reconciler: Reconciler) -> None:
        """Until ``stop_at``: expect the decisions of the slots reached that a previous owner
        fired and index their jobs' following slots. After the slots due now, not as each is
        reached: the victim of a mid-spike kill had fired the first 21,500 of its slots in the
        order its survivor reaches them, and settling each one then (a job read and decoded,
        its next slot computed) put 1.3 s before the survivor's first fire
        (``bench.failover --spike``)."""
        for part, left in list(self.to_settle.items()):
            index = indexes[part]
            while left and time.monotonic() < stop_at:
                job_id, slot, fired_ms = left.popleft()
                raw = jobs.get_in(part, job_id.encode())
                if raw is None:
                    continue  # deleted since
                job = codec().decode(raw)
                reconciler.expect(Pending(schedule.fire_id(job_id, slot), job_id, part, slot,
                                          fired_ms, lateness_bound_ms(job)))
                if job_id not in index:  # else indexed again since, by a change of the job
                    schedule_next(index, job, schedule.next_after(job["schedule"], job_id, slot))
            if not left:
                del self.to_settle[part], self.floor[part]

    def drop(self, part: int) -> list[tuple[str, int]]:
        """Revoked: forget the partition; returns the (job id, slot) still to settle, which go
        back in its index as they were: the next owner reads their records in the tail since
        the mark, which stayed below them (or fires them again, and the executor runs each once)."""
        self.forget(part)
        self.floor.pop(part, None)
        return [(job_id, slot) for job_id, slot, _ in self.to_settle.pop(part, ())]

    def forget(self, part: int) -> None:
        self.fired_before.pop(part, None)
        self.until.pop(part, None)
