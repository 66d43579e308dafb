"""The scheduler's due-time index: which job is due next, without scanning the job table.

A binary heap of ``(due_ms, version, job_id)`` with lazy deletion: changing or removing a job
bumps its version, and stale heap entries are dropped when they surface. The version comes
before the job id because versions are unique: entries due in the same millisecond (a whole
top-of-minute spike) are ordered by one int comparison, not by comparing job ids (a pop cost
2.5 µs with 50,000 entries tied on their due time). Push and pop are
O(log n), so one worker can hold a million jobs and pop ten thousand due slots in a second.
Each entry also carries the nominal slot, which differs from the due time by the job's jitter
(or by catch-up pacing). Pure data structure; the scheduler owns one per assigned partition.

Entries due soon can be *staged* (``stage``): moved to a second, small heap so the scheduler
can prepare them (read and decode the job, compute the following slot) before they are due,
once each, instead of doing that work in the second they all fall due. The preparation is
attached to the entry (``attach``) and lives and dies with it: ``set`` and ``remove`` drop it
with the entry they supersede, so a job changed after its slot was prepared can never fire as
it was. ``pop_due`` returns staged and unstaged entries together in due order.
"""

from __future__ import annotations

import heapq
from typing import Any

Entry = tuple[int, int, str]  # (due_ms, version, job_id)


class DueIndex:
    def __init__(self) -> None:
        self._heap: list[Entry] = []
        self._staged: list[Entry] = []  # a heap too: a staged entry may be re-set earlier
        self._live: dict[str, tuple[int, int, int]] = {}  # job_id -> (due_ms, version, slot_ms)
        self._attached: dict[str, Any] = {}  # job_id -> preparation of its live entry
        self._version = 0

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._live

    @property
    def prepared(self) -> int:
        """How many live entries carry a preparation (what bounds the memory of a spike)."""
        return len(self._attached)

    def jobs(self) -> list[str]:
        return list(self._live)

    def next_slot(self, job_id: str) -> int | None:
        entry = self._live.get(job_id)
        return entry[2] if entry else None

    def set(self, job_id: str, slot_ms: int | None, due_ms: int | None = None) -> None:
        """Schedule ``job_id``'s slot ``slot_ms`` to be handled at ``due_ms`` (default: the slot).

        None removes the job (schedule ended, deleted)."""
        self._attached.pop(job_id, None)
        if slot_ms is None:
            self._live.pop(job_id, None)
            return
        due = slot_ms if due_ms is None else due_ms
        self._version += 1
        self._live[job_id] = (due, self._version, slot_ms)
        heapq.heappush(self._heap, (due, self._version, job_id))
        if len(self._heap) + len(self._staged) > 4 * len(self._live) + 1024:
            self._compact()

    def remove(self, job_id: str) -> None:
        self._live.pop(job_id, None)
        self._attached.pop(job_id, None)

    def attach(self, job_id: str, preparation: Any) -> None:
        """Attach ``preparation`` to ``job_id``'s live entry; ``pop_due`` hands it back."""
        if job_id in self._live:
            self._attached[job_id] = preparation

    def peek(self) -> int | None:
        """The earliest live due time, or None when empty."""
        source = self._earliest()
        return source[0][0] if source else None

    def pop_due(self, now_ms: int, limit: int) -> list[tuple[str, int, Any]]:
        """Remove and return up to ``limit`` (job_id, slot_ms, preparation or None) due at or
        before ``now_ms``, earliest due first. The caller must ``set`` each job's following
        slot."""
        due: list[tuple[str, int, Any]] = []
        live, attached = self._live, self._attached
        while len(due) < limit:
            source = self._earliest()
            if source is None or source[0][0] > now_ms:
                break
            # pop from this heap for as long as it stays ahead of the other one's head, without
            # asking again which heap is ahead (in a spike, every due entry is in one heap: this
            # inner loop is where a spike's slots come from, a third of a slot's cost before)
            other = self._heap if source is self._staged else self._staged
            bound = other[0] if other else None  # live: _earliest dropped the stale heads
            while len(due) < limit and source:
                entry = source[0]
                if entry[0] > now_ms or (bound is not None and entry > bound):
                    break
                heapq.heappop(source)
                _, version, job_id = entry
                current = live.get(job_id)
                if current is None or current[1] != version:
                    continue  # superseded or removed since it was pushed
                del live[job_id]
                due.append((job_id, current[2], attached.pop(job_id, None)))
        return due

    def stage(self, until_ms: int, limit: int) -> list[tuple[str, int]]:
        """Stage up to ``limit`` unstaged live entries due at or before ``until_ms`` and return
        their (job_id, slot_ms), earliest first, for the caller to prepare and ``attach``.
        Staging changes nothing that ``pop_due``, ``peek`` or ``len`` report."""
        staged: list[tuple[str, int]] = []
        while len(staged) < limit:
            self._drop_stale(self._heap)
            if not self._heap or self._heap[0][0] > until_ms:
                break
            entry = heapq.heappop(self._heap)
            heapq.heappush(self._staged, entry)
            staged.append((entry[2], self._live[entry[2]][2]))
        return staged

    def slots_through(self, slot_ms: int) -> list[str]:
        """Jobs whose live slot is at or before ``slot_ms``."""
        return [job_id for job_id, (_, _, slot) in self._live.items() if slot <= slot_ms]

    def detach(self) -> None:
        """Drop every preparation and unstage every entry: what was prepared is only valid for
        as long as this worker owns the partition (``streams.scheduling.warm_index``)."""
        self._attached.clear()
        self._compact()

    def _earliest(self) -> list[Entry] | None:
        """The heap (staged or not) whose head is the earliest live entry, None when empty."""
        self._drop_stale(self._heap)
        self._drop_stale(self._staged)
        if not self._staged:
            return self._heap or None
        if not self._heap or self._staged[0] <= self._heap[0]:
            return self._staged
        return self._heap

    def _drop_stale(self, heap: list[Entry]) -> None:
        while heap:
            _, version, job_id = heap[0]
            live = self._live.get(job_id)
            if live is not None and live[1] == version:
                return
            heapq.heappop(heap)

    def _compact(self) -> None:
        """Rebuild from the live entries; everything becomes unstaged (``stage`` returns those
        entries again; their attached preparations stay)."""
        self._heap = [(due, version, job_id) for job_id, (due, version, _) in self._live.items()]
        self._staged = []
        heapq.heapify(self._heap)
