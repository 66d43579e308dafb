"""Which failed attempts of a target the executor tries again (its waits: ``streams.runtime.backoff``).
Pure."""

from __future__ import annotations

from streams.runtime.backoff import backoff_s

RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


def retryable(status_code: int | None) -> bool:
    """Transport errors (no status) and overload/server statuses are worth another attempt; a 4xx
    such as 400/404 will fail the same way again, so it is final."""
    return status_code is None or status_code in RETRYABLE_STATUS or status_code >= 500


def throttle_wait_s(throttled: int, initial_s: float, max_s: float, seed: str, now_ms: int,
                    run_by_ms: int) -> float | None:
    """How long to wait before trying a throttled attempt again (its ``throttled``-th throttle,
    counting from 1: the job's own backoff), or None when the wait would end past the slot's
    deadline ``run_by_ms``. Why apart from ``retryable``: a throttled request sent nothing, so
    retrying is always safe, and counting it against the job's few attempts would drop a
    reminder only because the account was busy; the deadline (``misfire.max_lateness_s``) is
    what bounds it, as it bounds a slot that waited to start."""
    wait = backoff_s(throttled, initial_s, max_s, seed)
    return wait if now_ms + wait * 1000 <= run_by_ms else None
