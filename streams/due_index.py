"""The scheduler's due-time index: which job is due next, without scanning the job table.

A binary heap of ``(next_slot_ms, job_id, version)`` with lazy deletion: changing or removing a
job bumps its version, and stale heap entries are dropped when they surface. Push and pop are
O(log n), so one worker can hold a million jobs and pop ten thousand due slots in a second.
Pure data structure; the scheduler owns one per assigned partition.
"""

from __future__ import annotations

import heapq


class DueIndex:
    def __init__(self) -> None:
        self._heap: list[tuple[int, str, int]] = []
        self._live: dict[str, tuple[int, int]] = {}  # job_id -> (next_slot_ms, version)
        self._version = 0

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._live

    def next_slot(self, job_id: str) -> int | None:
        entry = self._live.get(job_id)
        return entry[0] if entry else None

    def set(self, job_id: str, slot_ms: int | None) -> None:
        """Schedule ``job_id`` at ``slot_ms``; None removes it (schedule ended, paused, deleted)."""
        if slot_ms is None:
            self._live.pop(job_id, None)
            return
        self._version += 1
        self._live[job_id] = (slot_ms, self._version)
        heapq.heappush(self._heap, (slot_ms, job_id, self._version))

    def remove(self, job_id: str) -> None:
        self._live.pop(job_id, None)

    def peek(self) -> int | None:
        """The earliest live slot, or None when empty."""
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int, limit: int) -> list[tuple[str, int]]:
        """Remove and return up to ``limit`` (job_id, slot_ms) with slot_ms <= now_ms, earliest first.

        The caller must ``set`` each job's following slot; until then the job is not in the index.
        """
        due: list[tuple[str, int]] = []
        while self._heap and len(due) < limit:
            slot, job_id, version = self._heap[0]
            live = self._live.get(job_id)
            if live is None or live[1] != version:
                heapq.heappop(self._heap)
                continue
            if slot > now_ms:
                break
            heapq.heappop(self._heap)
            del self._live[job_id]
            due.append((job_id, slot))
        return due

    def _drop_stale(self) -> None:
        while self._heap:
            slot, job_id, version = self._heap[0]
            live = self._live.get(job_id)
            if live is not None and live[1] == version:
                return
            heapq.heappop(self._heap)
