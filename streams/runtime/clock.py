"""The wall clock every cronstream process reads, in epoch milliseconds.

One function, so the modules that take a clock as a parameter default to the same one and a test
passes its own instead.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    """Now, in milliseconds since the epoch (the unit of every ``*_ms`` field in ``schemas/``)."""
    return time.time_ns() // 1_000_000
