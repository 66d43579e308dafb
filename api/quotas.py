"""Per-tenant quotas whose check and write are one step: what is being written counts too.

A quota was checked, then the record written after an ``await`` (the broker's acknowledgement):
concurrent creates all read the count before any of them had written, and a tenant with a
quota of 3 jobs got 10 (issue 40). ``Quotas.reserve`` counts a write from its check until the
caller's own store holds it, so the next check sees it either way. The count is per API
process: a deployment of several API processes divides a tenant among them or accepts an
overshoot of at most one in-flight batch per process (docs/security.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from api.errors import problem


class Quotas:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # reserved from the loop and from the thread pool
        self._pending: dict[tuple[str, str], int] = {}

    @contextmanager
    def reserve(self, tenant: str, what: str, n: int, limit: int,
                current: Callable[[], int]) -> Iterator[None]:
        """Hold ``n`` more of ``what`` for ``tenant`` while the block writes them, or a 403
        naming the quota. ``current()`` is the count the caller's store keeps; the block must
        have put its records there before it ends (or written none)."""
        if n < 0:
            raise ValueError("a reservation holds room, it cannot give any back")
        key = (tenant, what)
        with self._lock:
            pending = self._pending.get(key, 0)
            if n > 0 and current() + pending + n > limit:
                raise problem(403, "", f"tenant {tenant} has reached its quota of {limit} "
                              f"{what}", "quota_exceeded")
            if n:  # nothing held, nothing to give back: concurrent bulk deletes (n = 0) each
                # gave back the key another had emptied, a KeyError and a 500 (bench.churn)
                self._pending[key] = pending + n
        try:
            yield
        finally:
            if n:
                with self._lock:
                    left = self._pending[key] - n
                    if left:
                        self._pending[key] = left
                    else:
                        del self._pending[key]
