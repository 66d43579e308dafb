"""Schedule math: when are a job's slots? Pure functions, no broker, no clock.

Times are integer epoch milliseconds (UTC) everywhere in cronstream. A cron expression is matched
against wall-clock time in the job's IANA time zone (``streams.scheduling.cron``), then each matching wall
time becomes zero, one or two instants by the job's DST policy:

- ``dst_gap`` — a wall time that does not exist (02:30 on the spring-forward day in New York):
  ``shift`` (default) runs it at the offset in force before the change, i.e. as many minutes after
  the jump as it would have been (02:30 → 03:30 EDT); ``skip`` gives no slot. (Vixie cron runs
  the skipped fixed-time jobs at once, at 03:00.)
- ``dst_repeat`` — a wall time that happens twice (01:30 on the fall-back day): ``first``
  (default) runs only the first occurrence, ``last`` only the second, ``both`` runs both. A
  slot's fire id is its instant, so the two occurrences of ``both`` have different fire ids.
  (Vixie cron runs a job whose minute or hour field starts with ``*`` in both, others once.)

``tests/unit/scheduling/test_cron_vs_croniter.py`` checks these policies against a minute-by-minute walk.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from streams.scheduling import cron

DST_GAP = ("shift", "skip")
DST_REPEAT = ("first", "last", "both")
BACKFILL_LIMIT = 10_000  # slots one backfill request may re-drive
_HOUR_MS = 3600 * 1000
_NEAR_MS = 2 * _HOUR_MS  # a DST transition within this distance needs the careful search


class ScheduleError(ValueError):
    """An invalid schedule; ``field`` names the offending field of the API body."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@lru_cache(maxsize=1024)
def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ScheduleError("schedule.timezone", f"unknown time zone {name!r}") from exc


@lru_cache(maxsize=65536)
def _spec(expr: str, drawn: tuple[int, ...]) -> cron.CronSpec:
    with _cron_errors(expr):
        return cron.parse_drawn(expr, drawn)


def compiled(expr: str, job_id: str) -> cron.CronSpec:
    """Parsed expression, cached by the values its ``H`` fields draw for the job
    (``cron.draws``): jobs drawing the same values share it."""
    return _spec(expr, _draws(expr, job_id))


def _draws(expr: str, job_id: str) -> tuple[int, ...]:
    with _cron_errors(expr):
        return cron.draws(expr, job_id)


@contextmanager
def _cron_errors(expr: str) -> Iterator[None]:
    try:
        yield
    except cron.CronSyntaxError as exc:
        raise ScheduleError("schedule.cron", f"invalid cron expression {expr!r}: {exc}") from exc


def validate(schedule: dict[str, Any], job_id: str) -> None:
    """Raise ScheduleError naming the field if the schedule cannot produce slots."""
    kinds = [k for k in ("cron", "at_ms", "every_s") if schedule.get(k) is not None]
    if len(kinds) != 1:
        raise ScheduleError("schedule", "exactly one of cron, at, every_s is required")
    zone(schedule.get("timezone") or "UTC")
    if schedule.get("cron") is not None:
        compiled(schedule["cron"], job_id)
    every = schedule.get("every_s")
    if every is not None and every < 1:
        raise ScheduleError("schedule.every_s", "must be >= 1")
    if schedule.get("dst_gap", "shift") not in DST_GAP:
        raise ScheduleError("schedule.dst.gap", f"must be one of {', '.join(DST_GAP)}")
    if schedule.get("dst_repeat", "first") not in DST_REPEAT:
        raise ScheduleError("schedule.dst.repeat", f"must be one of {', '.join(DST_REPEAT)}")
    start, end = schedule.get("start_ms"), schedule.get("end_ms")
    if start is not None and end is not None and end < start:
        raise ScheduleError("schedule.end", "is before start")


def _wall(ms: int, tz: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=tz).replace(tzinfo=None)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp()) * 1000


def instants(wall: datetime, tz: ZoneInfo, gap: str = "shift", repeat: str = "first") -> list[int]:
    """The instants (ms) a matching wall time stands for, by DST policy, earliest first."""
    first = _ms(wall.replace(tzinfo=tz, fold=0))
    second = _ms(wall.replace(tzinfo=tz, fold=1))
    if first == second:
        return [first]
    if _wall(first, tz) != wall:  # no such wall time: a spring-forward gap
        return [first] if gap == "shift" else []
    early, late = min(first, second), max(first, second)
    return {"first": [early], "last": [late], "both": [early, late]}[repeat]


def _utc_offset(ms: int, tz: ZoneInfo) -> timedelta | None:
    return datetime.fromtimestamp(ms / 1000, tz=tz).utcoffset()


@lru_cache(maxsize=4096)
def _near_transition(tz_name: str, hour: int) -> bool:
    """Whether an offset change lies within ``_NEAR_MS`` of any instant of this hour (since the
    epoch), by the offsets at the two ends of the widened window (exact while a zone changes its
    offset at most once in 5 h, true of every tzdata zone since 1970); cached per hour because every
    job searching from the same hour asks the same (two zone conversions a job on a restart). A
    false alarm only costs the careful search."""
    tz = zone(tz_name)
    start = hour * _HOUR_MS
    return _utc_offset(start - _NEAR_MS, tz) != _utc_offset(start + _HOUR_MS + _NEAR_MS, tz)


def _next_cron(schedule: dict[str, Any], job_id: str, after_ms: int) -> int | None:
    expr = schedule["cron"]
    return _next_cron_from(expr, _draws(expr, job_id), schedule.get("timezone") or "UTC",
                           schedule.get("dst_gap") or "shift",
                           schedule.get("dst_repeat") or "first", after_ms)


@lru_cache(maxsize=65536)
def _next_cron_from(expr: str, drawn: tuple[int, ...], tz_name: str, gap: str, repeat: str,
                    after_ms: int) -> int | None:
    """Cached because jobs share both the expression and the instant they search from: after a
    restart every job of a partition resumes from the partition's fired-through mark, and after a
    slot every job that fired in it looks for its next one; jobs of a hashed expression share a
    search when they draw the same ``H`` values. 22 µs per search (a yearly expression, UTC)
    becomes a dictionary hit, which is most of what rebuilding the due index of
    a million jobs costs besides decoding them (``bench/scale.py``)."""
    spec = _spec(expr, drawn)
    tz = zone(tz_name)
    # A wall time the DST policy drops (``skip`` in a gap) sends the search on to the next one;
    # past ``cron.SEARCH_DAYS`` it gives up, as the engine does: ``30 2 * 3 0#2`` in New York
    # with ``skip`` is always in the spring-forward gap and never runs.
    if not _near_transition(tz_name, after_ms // _HOUR_MS):
        wall = _wall(after_ms, tz)
        give_up = wall + timedelta(days=cron.SEARCH_DAYS)
        while (wall := cron.next_wall(spec, wall)) is not None and wall <= give_up:
            later = [i for i in instants(wall, tz, gap, repeat) if i > after_ms]
            if later:
                return later[0]
        return None
    # Near a transition, wall order and instant order disagree: search the walls around it and
    # keep the earliest instant; past the window they agree again, so the first hit there wins.
    horizon = _wall(after_ms, tz) + timedelta(milliseconds=2 * _NEAR_MS)
    give_up = horizon + timedelta(days=cron.SEARCH_DAYS)
    wall = _wall(after_ms - _NEAR_MS, tz)
    best: int | None = None
    while (wall := cron.next_wall(spec, wall)) is not None:
        later = [i for i in instants(wall, tz, gap, repeat) if i > after_ms]
        if later and (best is None or later[0] < best):
            best = later[0]
        if (wall > horizon and best is not None) or wall > give_up:
            return best
    return best


def next_after(schedule: dict[str, Any], job_id: str, after_ms: int) -> int | None:
    """The first nominal slot strictly after ``after_ms``, or None when the schedule has ended."""
    start = schedule.get("start_ms")
    end = schedule.get("end_ms")
    if start is not None and after_ms < start - 1:
        after_ms = start - 1
    slot: int | None
    if schedule.get("at_ms") is not None:
        slot = schedule["at_ms"] if schedule["at_ms"] > after_ms else None
    elif schedule.get("every_s") is not None:
        period = schedule["every_s"] * 1000
        anchor = start if start is not None else 0
        slot = anchor + ((after_ms - anchor) // period + 1) * period
    else:
        slot = _next_cron(schedule, job_id, after_ms)
    if slot is not None and end is not None and slot > end:
        return None
    return slot


def slots_between(schedule: dict[str, Any], job_id: str, after_ms: int, until_ms: int | None,
                  limit: int) -> list[int]:
    """Nominal slots in (after_ms, until_ms], at most ``limit`` of them (the earliest);
    ``until_ms`` None is no bound: the next ``limit`` slots, however far apart (a preview of a
    leap-day job's 20 slots spans 80 years)."""
    out: list[int] = []
    cursor = after_ms
    while len(out) < limit:
        slot = next_after(schedule, job_id, cursor)
        if slot is None or (until_ms is not None and slot > until_ms):
            break
        out.append(slot)
        cursor = slot
    return out


def fire_id(job_id: str, nominal_ms: int) -> str:
    """``job_id@nominal time`` in RFC 3339 UTC with milliseconds: the same slot, the same id."""
    return f"{job_id}@{_utc_second(nominal_ms // 1000)}.{nominal_ms % 1000:03d}Z"


@lru_cache(maxsize=4096)
def _utc_second(second: int) -> str:
    """Cached: the jobs of a spike share their second, and formatting it was 6 % of a spike."""
    return datetime.fromtimestamp(second, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


def jitter_ms(fire_id_: str, jitter_s: int) -> int:
    """A slot's fixed delay within ``jitter_s``: the same for every replay of the same slot."""
    if jitter_s <= 0:
        return 0
    return zlib.crc32(fire_id_.encode()) % (jitter_s * 1000 + 1)

