"""How long to wait before trying again: exponential, capped, jittered, and the same for the same
seed. Pure. The executor's retries of a target (``streams.execution.retries`` says which failures
are retried) and the walker's of a chunk and of an order's range wait by it."""

from __future__ import annotations

import zlib


def backoff_s(attempt: int, initial_s: float, max_s: float, seed: str) -> float:
    """Wait before attempt ``attempt + 1`` (attempt counts from 1): exponential, capped, and
    jittered to 50–100% of the step so a thousand jobs that failed together do not retry together.
    The jitter is derived from ``seed`` (the fire id) so a replay waits the same."""
    step = min(max_s, initial_s * (2 ** (attempt - 1)))
    fraction = (zlib.crc32(f"{seed}#{attempt}".encode()) % 1000) / 1000
    return step * (0.5 + 0.5 * fraction)
