"""Which failed attempts of a target the executor tries again (its waits: ``streams.runtime.backoff``).
Pure."""

from __future__ import annotations

RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


def retryable(status_code: int | None) -> bool:
    """Transport errors (no status) and overload/server statuses are worth another attempt; a 4xx
    such as 400/404 will fail the same way again, so it is final."""
    return status_code is None or status_code in RETRYABLE_STATUS or status_code >= 500
