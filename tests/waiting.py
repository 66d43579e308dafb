"""The suite's one way to wait: for a condition that says the awaited thing happened, never for
a length of time, and never an assertion on how long something took.

``wait_for`` polls a probe (a process, a broker, a database) until it holds or a deadline passes;
the deadline only bounds a failing test. ``loop_turns`` lets an asyncio test's other tasks run
before it asserts what they did, or did not, do: counted in turns of the event loop, not in
seconds, so a slow or busy machine gives them the same chances.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


def wait_for(probe: Callable[[], Any], timeout_s: float = 60, every_s: float = 0.5,
             explain: Callable[[], str] | None = None) -> Any:
    """Poll until ``probe`` returns something truthy; returns it, or fails the test (with
    ``explain()``'s account of the system, so a CI failure can be read without its machine)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            why = f"\n{explain()}" if explain else ""
            raise AssertionError(f"condition not met within {timeout_s}s (last: {value!r}){why}")
        time.sleep(every_s)


async def loop_turns(turns: int = 50) -> None:
    """Yield to the event loop ``turns`` times: every task that can run meanwhile runs, each
    chain of callbacks up to ``turns`` steps long."""
    for _ in range(turns):
        await asyncio.sleep(0)
