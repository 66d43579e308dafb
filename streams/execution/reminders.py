"""A reminder on two channels (issue 45, seed 002: "users setup reminders (text or email)"): an
email and a text for one slot, both sent (``deliver: all``) or the preferred one with the other
as its fallback (``deliver: fallback``). Pure decisions; the executor runs them
(``Executor.run_reminder``).

Each channel is run as a lone email or text is, at most once, and recorded as its own ledger
entry: record id ``<fire id>#<channel>`` (``channel_id``), its done mark under the same key, so a
crash between the channels sends neither again. The mark holds the entry (``Recorded``) and is
acknowledged before it, so a run again after a crash writes the same entry again. A fire id
ends in ``Z`` (``schedule.fire_id``), so a channel's id is never another slot's.

Fallback passes on to the next channel only when the one before was not sent for its
recipient's sake: suppressed (opted out, bounced, complained: the ledger's ``suppressed``) or
a text inside its quiet hours (``QUIET``). A failure, or a send whose outcome is ``unknown``,
does not: the reminder may have arrived, and a second one on another channel is the double a
user asked not to get. A scheduler does not hold a reminder for its text's quiet hours (its
email would wait too): the text is recorded not run for that slot, with the window's reason.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from streams.records import Fired, Target

REMINDER = "reminder"
CHANNELS = ("email", "sms")
DELIVER = ("all", "fallback")
SEP = "#"
# a channel's verdict when its text was inside quiet hours: recorded ``not_run``, and the
# fallback's cue, so its done mark says so (a run again after a crash decides the same way)
QUIET = "quiet_hours"
# a channel not needed: the one before it settled the reminder (``deliver: fallback``)
NOT_NEEDED = "not_needed"
# the verdicts that pass a fallback reminder on to its next channel
PASS_ON = frozenset({"suppressed", QUIET})


def channel_id(fire_id: str, channel: str) -> str:
    """A channel's record id and done-mark key."""
    return f"{fire_id}{SEP}{channel}"


def channels_of(target: Target) -> list[str]:
    """The channels in the order of preference (the order the job gave them)."""
    return [c for c in (target["reminder_channels"] or []) if c in CHANNELS]


def channel_fired(fired: Fired, channel: str) -> Fired:
    """The fired record as its channel is sent: the same slot and fire id (the mail's tag and
    the text's context carry it), its target the channel's kind (the flat target already holds
    both channels' fields)."""
    return {**fired, "target": {**fired["target"], "type": channel}}


def goes_on(deliver: str | None, verdicts: Sequence[str]) -> bool:
    """Whether the next channel is sent, given the verdicts of those before it."""
    if deliver != "fallback" or not verdicts:
        return True
    return verdicts[-1] in PASS_ON


def ledger_outcome(verdict: str) -> str:
    """A channel's outcome on the ledger: a verdict is an outcome but for the channels that
    were not run (inside quiet hours, or not needed)."""
    return "not_run" if verdict in (QUIET, NOT_NEEDED) else verdict


# the reason a fallback channel not needed begins with: the runs' ``only=not_run`` leaves those
# rows out (the reminder was sent, or its first channel settled it: nothing to look into)
NOT_NEEDED_REASON = "fallback: not needed"


def not_needed_reason(channels: Sequence[str], verdicts: Sequence[str]) -> str:
    """Why a fallback channel was not sent: the channel before it, and how it ended."""
    return (f"{NOT_NEEDED_REASON}, the {channels[len(verdicts) - 1]} channel ended "
            f"{ledger_outcome(verdicts[-1])}")


def slot_outcome(verdicts: Sequence[str]) -> str:
    """The slot's outcome (its done mark, the executions metric): succeeded when a channel
    was sent; else unknown when one may have been; else failed when one failed; else
    suppressed when a recipient was; else not run."""
    outcomes = {ledger_outcome(v) for v in verdicts}
    for outcome in ("succeeded", "unknown", "failed", "suppressed"):
        if outcome in outcomes:
            return outcome
    return "not_run"


@dataclass(frozen=True)
class Recorded:
    """A channel's verdict and its ledger entry's fields, kept in its done mark. The mark is
    acknowledged before the entry is written, and a run again after a crash writes the entry
    again from it: a crash between the two never turns a channel recorded ``suppressed`` (or
    sent) into ``unknown``, which would stop a fallback that was owed."""

    verdict: str
    decision: str
    reason: str | None = None
    attempts: int = 0
    status_code: int | None = None
    error: str | None = None
    message_id: str | None = None

    def encode(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Recorded:
        return cls(**json.loads(raw))
