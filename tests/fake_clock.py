"""A clock for tests of code that measures or waits out time: it moves only when the code under
test sleeps on it, or the test advances it. What the code waited is then exact, on any machine,
and a test asserts it instead of timing the code with the wall clock."""

from __future__ import annotations

import asyncio
import math


class FakeClock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now  # not 0: code that starts its own reckoning at 0.0 must not see a tie
        self.slept: list[float] = []  # every sleep asked for, in order

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        """Any positive sleep moves the clock, if only by its last digit: code that sleeps a
        remainder too small to add to ``now`` must not see time stand still, as it never does."""
        self.slept.append(seconds)
        if seconds > 0:
            self.now = max(self.now + seconds, math.nextafter(self.now, math.inf))

    async def async_sleep(self, seconds: float) -> None:
        """Time passes at once; the sleeper still yields, as ``asyncio.sleep`` does."""
        self.sleep(seconds)
        await asyncio.sleep(0)
