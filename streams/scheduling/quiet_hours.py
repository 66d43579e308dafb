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
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from enum import Enum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

WALL_TIME = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])")
REASON = "quiet_hours"  # the ledger's reason for a text held or expired by them


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


def ends_at_ms(window: QuietHours, at_ms: int) -> int | None:
    """When the window holding the instant ``at_ms`` ends (ms), or None when it is outside
    every window: the hour a held text may go."""
    at = datetime.fromtimestamp(at_ms / 1000, UTC)
    today = at.astimezone(window.zone).date()
    for day in (today - timedelta(days=1), today):
        start, end = _span(window, day)
        if start <= at < end:
            return int(end.timestamp() * 1000)
    return None


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
    ``fire_once`` and ``fire_all`` hold it to the window's end, unless that is past its
    deadline, when it is expired now (waiting for a send that will not happen only delays the
    decision).
    """
    if window is None:
        return Decision(Verdict.SEND)
    until = ends_at_ms(window, now_ms)
    if until is None:
        return Decision(Verdict.SEND)
    end_local = datetime.fromtimestamp(until / 1000, UTC).astimezone(window.zone)
    ends = end_local.isoformat(timespec="minutes")
    if skip:
        return Decision(Verdict.EXPIRE, reason=f"{REASON}: due inside them, misfire policy skip")
    if run_by_ms is not None and until > run_by_ms:
        return Decision(Verdict.EXPIRE, reason=f"{REASON}: they end at {ends}, after the "
                        "slot's max_lateness_s")
    return Decision(Verdict.HOLD, until_ms=until, reason=f"{REASON}: held until {ends}")
