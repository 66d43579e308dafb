"""Retry policy of the executor: which failures to retry, and how long to wait. Pure functions."""

from __future__ import annotations

import zlib

RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


def retryable(status_code: int | None) -> bool:
    """Transport errors (no status) and overload/server statuses are worth another attempt; a 4xx
    such as 400/404 will fail the same way again, so it is final."""
    return status_code is None or status_code in RETRYABLE_STATUS or status_code >= 500


def backoff_s(attempt: int, initial_s: float, max_s: float, seed: str) -> float:
    """Wait before attempt ``attempt + 1`` (attempt counts from 1): exponential, capped, and
    jittered to 50–100% of the step so a thousand jobs that failed together do not retry together.
    The jitter is derived from ``seed`` (the fire id) so a replay waits the same."""
    step = min(max_s, initial_s * (2 ** (attempt - 1)))
    fraction = (zlib.crc32(f"{seed}#{attempt}".encode()) % 1000) / 1000
    return step * (0.5 + 0.5 * fraction)
