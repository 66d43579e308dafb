"""What to do with a slot when the scheduler reaches it: pure decision logic.

A slot reached within ``MISFIRE_THRESHOLD_MS`` of its nominal time is simply ``fired``. Later
than that it is a misfire (the worker was down, the partition was moving): the job's policy
decides, and a slot older than the job's ``max_lateness_s`` is ``expired_stale`` whatever the
policy, because a "good morning" at 13:00 is worse than none.
"""

from __future__ import annotations

from typing import NamedTuple

MISFIRE_THRESHOLD_MS = 5_000

POLICIES = ("fire_once", "fire_all", "skip")
# the decisions of a slot sent to run (``held_quiet_hours``: streams.scheduling.quiet_hours)
RUNS = frozenset({"fired", "missed_caught_up", "held_quiet_hours"})


class SlotDecision(NamedTuple):
    """A NamedTuple, not a frozen dataclass: one is made for every slot, and in a spike's second
    the frozen dataclass's ``__init__`` cost more than the decision itself."""

    # fired | missed_caught_up | held_quiet_hours | expired_stale | skipped_policy | skipped_paused
    decision: str
    reason: str | None
    lateness_ms: int

    @property
    def runs(self) -> bool:
        return self.decision in RUNS


def decide(*, slot_ms: int, following_slot_ms: int | None, now_ms: int, policy: str,
           max_lateness_s: int, paused: bool) -> SlotDecision:
    """Decide one slot. ``following_slot_ms`` is the job's next slot after this one, if any."""
    lateness = max(0, now_ms - slot_ms)
    if paused:
        return SlotDecision("skipped_paused", "job is paused", lateness)
    if lateness > max_lateness_s * 1000:  # before anything else: a job may allow < 5 s
        return SlotDecision(
            "expired_stale", f"{lateness} ms late exceeds max_lateness_s={max_lateness_s}", lateness
        )
    if lateness <= MISFIRE_THRESHOLD_MS:
        return SlotDecision("fired", None, lateness)
    if policy == "skip":
        return SlotDecision("skipped_policy", "misfire policy skip", lateness)
    if policy == "fire_once" and following_slot_ms is not None and following_slot_ms <= now_ms:
        return SlotDecision(
            "skipped_policy", "misfire policy fire_once: a later missed slot runs instead", lateness
        )
    return SlotDecision("missed_caught_up", f"caught up {lateness} ms late", lateness)


def fired_until(*, slot_ms: int, max_lateness_s: int, paused: bool) -> int | None:
    """The last moment at which ``decide`` says ``fired`` for this slot (None if it never
    does: a paused job). Computed when a slot is prepared, so that in a spike's second the
    scheduler compares one int instead of deciding again what it already knows: reached by
    then, the slot fires, whatever the job's policy."""
    if paused:
        return None
    return slot_ms + min(MISFIRE_THRESHOLD_MS, max_lateness_s * 1000)
