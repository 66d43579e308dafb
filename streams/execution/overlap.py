"""What to do with a slot of a job whose previous run is still in flight. Pure decision logic."""

from __future__ import annotations

from enum import Enum

POLICIES = ("allow", "skip", "buffer_one")


class Action(Enum):
    RUN = "run"  # start it now
    SKIP = "skip"  # record skipped_overlap
    BUFFER = "buffer"  # hold it until the running one ends (replacing any held one)


def decide(policy: str, running: bool) -> Action:
    if not running or policy == "allow":
        return Action.RUN
    if policy == "skip":
        return Action.SKIP
    return Action.BUFFER
