"""Quiet hours of a text reminder: a daily window of the recipient's wall clock (``21:00`` to
``08:00`` in ``America/New_York``) in which no text is sent (issue 45). A text due inside one
is held to the window's end, or expired by the job's misfire policy, with the reason on the
ledger. Pure, the clock passed in.

Why windows are spans of instants, not a test of the wall clock: on the day clocks fall back,
a window ending at 01:30 would be "inside" again for the repeated hour if judged by wall time
alone, and a window boundary in a spring-forward gap (02:30 in New York) names no instant at
all. Each boundary is therefore the *first instant at which the recipient's wall clock reaches
it*: a repeated time is its first occurrence, a skipped one is the moment the clock jumps past
it. A window crossing midnight (start after end) ends on the next local day. A window is
found from the local day of the instant and the day before, so an instant after midnight of
a window that began yesterday is inside it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from enum import Enum
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from streams.scheduling.misfire import MISFIRE_THRESHOLD_MS

WALL_TIME = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])")
# how long before a window's start a slot may fall due and still be held: a slot reached
# within the misfire threshold is on time, and one reached inside the window is held
HELD_MARGIN_MS = MISFIRE_THRESHOLD_MS
REASON = "quiet_hours"  # the ledger's reason for a text held or expired by them
# the ledger's decision of a slot held to its window's end and then sent (a run: its outcome
# is the send's); one expired by them is ``expired_stale`` with a reason beginning ``REASON``
HELD = "held_quiet_hours"


@dataclass(frozen=True)
class QuietHours:
    start: time
    end: time
    zone: ZoneInfo

    @property
    def crosses_midnight(self) -> bool:
        return self.start > self.end


def parse_wall_time(text: str) -> time:
    """``HH:MM`` (24-hour) as a time; ValueError otherwise."""
    found = WALL_TIME.fullmatch(text)
    if found is None:
        raise ValueError(f"{text!r} is not a 24-hour HH:MM time")
    return time(int(found.group(1)), int(found.group(2)))


def parse(start: str, end: str, timezone: str) -> QuietHours:
    """A window from the API's strings; ValueError naming the problem (an unknown zone, a bad
    time, an empty window: start equal to end would be all day or never, so it is refused)."""
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"{timezone!r} is not an IANA time zone") from exc
    window = QuietHours(parse_wall_time(start), parse_wall_time(end), zone)
    if window.start == window.end:
        raise ValueError("quiet hours need a start different from their end")
    return window


def first_instant(day: date, wall: time, zone: ZoneInfo) -> datetime:
    """The first instant (UTC) at which ``zone``'s wall clock reads ``wall`` on ``day``, or,
    for a time the clock skips (a spring-forward gap), the instant it jumps past it."""
    naive = datetime.combine(day, wall)
    earlier = naive.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if earlier.astimezone(zone).replace(tzinfo=None) == naive:
        return earlier  # it exists; fold 0 is its first occurrence when it repeats
    # in a gap, PEP 495's fold=1 reads it with the offset after the change and fold=0 with the
    # offset before: the change lies between those two instants, found to the second
    low = naive.replace(tzinfo=zone, fold=1).astimezone(UTC)
    high = earlier
    low, high = min(low, high), max(low, high)
    after = high.astimezone(zone).utcoffset()
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        if middle.astimezone(zone).utcoffset() == after:
            high = middle
        else:
            low = middle
    return high


def _span(window: QuietHours, day: date) -> tuple[datetime, datetime]:
    """The window that starts on local ``day``, as instants [start, end)."""
    end_day = day + timedelta(days=1) if window.crosses_midnight else day
    return (first_instant(day, window.start, window.zone),
            first_instant(end_day, window.end, window.zone))


def span_at_ms(window: QuietHours, at_ms: int) -> tuple[int, int] | None:
    """The window holding the instant ``at_ms`` as [start, end) in ms, or None when it is
    outside every window."""
    at = datetime.fromtimestamp(at_ms / 1000, UTC)
    today = at.astimezone(window.zone).date()
    for day in (today - timedelta(days=1), today):
        start, end = _span(window, day)
        if start <= at < end:
            return int(start.timestamp() * 1000), int(end.timestamp() * 1000)
    return None


def ends_at_ms(window: QuietHours, at_ms: int) -> int | None:
    """When the window holding the instant ``at_ms`` ends (ms), or None when it is outside
    every window: the hour a held text may go."""
    span = span_at_ms(window, at_ms)
    return None if span is None else span[1]


def last_end_ms(window: QuietHours, at_ms: int) -> int:
    """The end (ms) of the latest window that ended at or before ``at_ms``: the moment a text
    held and sent at ``at_ms`` was held until (the executor's ledger reason)."""
    at = datetime.fromtimestamp(at_ms / 1000, UTC)
    today = at.astimezone(window.zone).date()
    ends = (int(_span(window, day)[1].timestamp() * 1000)
            for day in (today - timedelta(days=offset) for offset in range(3)))
    return max(end for end in ends if end <= at_ms)


def inside(window: QuietHours, at_ms: int) -> bool:
    return ends_at_ms(window, at_ms) is not None


class Verdict(Enum):
    SEND = "send"  # outside quiet hours
    HOLD = "hold"  # wait until ``until_ms``, then send
    EXPIRE = "expire"  # never sent: the ledger's decision is expired, reason ``REASON``


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    until_ms: int | None = None  # HOLD: the window's end
    reason: str | None = None  # HOLD, EXPIRE: why, for the ledger


def decide(window: QuietHours | None, now_ms: int, run_by_ms: int | None,
           skip: bool = False) -> Decision:
    """What a text due now does under its quiet hours. ``run_by_ms`` is the slot's deadline,
    its nominal time plus the job's ``max_lateness_s`` (the fired record's ``run_by_ms``;
    None: none); ``skip`` is the job's misfire policy ``skip``.

    Held texts are late texts, so the misfire policy decides as it does for any late slot:
    ``skip`` never sends a slot late, so a text due in quiet hours is expired at once;
    ``fire_once`` and ``fire_all`` hold it to the window's end, unless that is at or past its
    deadline, when it is expired now (waiting for a send that will not happen only delays the
    decision).
    """
    if window is None:
        return Decision(Verdict.SEND)
    until = ends_at_ms(window, now_ms)
    if until is None:
        return Decision(Verdict.SEND)
    if skip:
        return Decision(Verdict.EXPIRE, reason=f"{REASON}: due inside them, misfire policy skip")
    if run_by_ms is not None and until >= run_by_ms:  # held to its deadline: late by a ms
        return Decision(Verdict.EXPIRE, reason=f"{REASON}: they end at {local(window, until)}, "
                        "after the slot's max_lateness_s")
    return Decision(Verdict.HOLD, until_ms=until, reason=held_reason(window, until))


def local(window: QuietHours, at_ms: int) -> str:
    """An instant on the recipient's clock, to the minute, with its offset."""
    at = datetime.fromtimestamp(at_ms / 1000, UTC).astimezone(window.zone)
    return at.isoformat(timespec="minutes")


def held_reason(window: QuietHours, until_ms: int) -> str:
    """The ledger's reason of a text held until ``until_ms``, the scheduler's and the
    executor's alike."""
    return f"{REASON}: held until {local(window, until_ms)}"


# -- where the scheduler and the executor meet a job's quiet hours ------------------------------

@lru_cache(maxsize=4096)
def _parsed(start: str, end: str, timezone: str) -> QuietHours | None:
    try:
        return parse(start, end, timezone)
    except ValueError:
        return None


def window_of(target: Mapping[str, Any]) -> QuietHours | None:
    """The quiet hours of a job's target (a ``Target`` record): an ``sms`` target with all
    three ``sms_quiet_*`` fields, else None. The API refuses a window ``parse`` refuses; a
    record that still carries one (written by hand) has none here."""
    if target.get("type") != "sms":
        return None
    start, end, zone = (target.get("sms_quiet_start"), target.get("sms_quiet_end"),
                        target.get("sms_quiet_timezone"))
    if not (start and end and zone):
        return None
    return _parsed(start, end, zone)


def held_until_ms(window: QuietHours, due_ms: int, now_ms: int, run_by_ms: int | None,
                  skip: bool = False) -> int | None:
    """A slot that fell due at ``due_ms`` and is reached at ``now_ms``, outside quiet hours:
    the end of the window it was held through (``decide`` at its due time said HOLD, and that
    window has ended by now), else None (it fell due outside them, or was theirs to expire)."""
    decision = decide(window, due_ms, run_by_ms, skip)
    if decision.verdict is Verdict.HOLD and decision.until_ms is not None \
            and decision.until_ms <= now_ms:
        return decision.until_ms
    return None


def held_since_ms(window: QuietHours, mark_ms: int, max_lateness_ms: int,
                  skip: bool = False) -> int | None:
    """Where a scheduler taking a partition over must resume a job from, instead of its
    fired-through mark ``mark_ms``: a slot held is indexed at its window's end, so the mark
    passes it, and it is owed again (re-derived from the job and the mark, not recorded).
    None when nothing can be held at the mark (outside quiet hours, or ``skip``, which holds
    nothing); else the earliest due time a held slot can have: the window's start, a
    ``HELD_MARGIN_MS`` before it (a slot due just before it and reached inside it is held
    too), and no earlier than the window's end less the job's lateness (an earlier slot was
    expired, its deadline before the end)."""
    if skip:
        return None
    span = span_at_ms(window, mark_ms)
    if span is None:
        return None
    start, end = span
    return max(start - HELD_MARGIN_MS, end - max_lateness_ms)



# -- the executor's thin checks (streams.execution.executor) -----------------------------------

def refused_at_run(target: Mapping[str, Any], now_ms: int) -> str | None:
    """The ledger's reason for a text whose run comes inside its quiet hours (None: it may be
    sent). The scheduler never sends one into them, but a record can reach its run there: a
    run backlog, a user's trigger or backfill, a reconciler's re-drive. The executor cannot
    hold it (its record would stay uncommitted for hours), so it is expired."""
    window = window_of(target)
    if window is None:
        return None
    until = ends_at_ms(window, now_ms)
    if until is None:
        return None
    return (f"{REASON}: its run came inside them (they end at {local(window, until)}); "
            "not sent")


def held_run_reason(target: Mapping[str, Any], fired_ms: int, note: str | None) -> str | None:
    """The ledger's reason for the run of a slot the scheduler held (decision ``HELD``),
    fired at ``fired_ms``: held until the end of the window before that, then the run's own
    note, if any."""
    window = window_of(target)
    if window is None:
        return note
    reason = held_reason(window, last_end_ms(window, fired_ms))
    return reason if not note else f"{reason}; {note}"
