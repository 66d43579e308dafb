"""The scheduler's due-time index: which job is due next, without scanning the job table.

A binary heap of ``(due_ms, job_id, version)`` with lazy deletion: changing or removing a job
bumps its version, and stale heap entries are dropped when they surface. Push and pop are
O(log n), so one worker can hold a million jobs and pop ten thousand due slots in a second.
Each entry also carries the nominal slot, which differs from the due time by the job's jitter
(or by catch-up pacing). Pure data structure; the scheduler owns one per assigned partition.
"""

from __future__ import annotations

import heapq


class DueIndex:
    def __init__(self) -> None:
        self._heap: list[tuple[int, str, int]] = []
        self._live: dict[str, tuple[int, int, int]] = {}  # job_id -> (due_ms, version, slot_ms)
        self._version = 0

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._live

    def jobs(self) -> list[str]:
        return list(self._live)

    def next_slot(self, job_id: str) -> int | None:
        entry = self._live.get(job_id)
        return entry[2] if entry else None

    def set(self, job_id: str, slot_ms: int | None, due_ms: int | None = None) -> None:
        """Schedule ``job_id``'s slot ``slot_ms`` to be handled at ``due_ms`` (default: the slot).

        None removes the job (schedule ended, deleted)."""
        if slot_ms is None:
            self._live.pop(job_id, None)
            return
        due = slot_ms if due_ms is None else due_ms
        self._version += 1
        self._live[job_id] = (due, self._version, slot_ms)
        heapq.heappush(self._heap, (due, job_id, self._version))
        if len(self._heap) > 4 * len(self._live) + 1024:
            self._compact()

    def remove(self, job_id: str) -> None:
        self._live.pop(job_id, None)

    def peek(self) -> int | None:
        """The earliest live due time, or None when empty."""
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int, limit: int) -> list[tuple[str, int]]:
        """Remove and return up to ``limit`` (job_id, slot_ms) due at or before ``now_ms``,
        earliest due first. The caller must ``set`` each job's following slot."""
        due: list[tuple[str, int]] = []
        while self._heap and len(due) < limit:
            when, job_id, version = self._heap[0]
            live = self._live.get(job_id)
            if live is None or live[1] != version:
                heapq.heappop(self._heap)
                continue
            if when > now_ms:
                break
            heapq.heappop(self._heap)
            del self._live[job_id]
            due.append((job_id, live[2]))
        return due

    def _drop_stale(self) -> None:
        while self._heap:
            _, job_id, version = self._heap[0]
            live = self._live.get(job_id)
            if live is not None and live[1] == version:
                return
            heapq.heappop(self._heap)

    def _compact(self) -> None:
        self._heap = [(due, job_id, version) for job_id, (due, version, _) in self._live.items()]
        heapq.heapify(self._heap)
