"""Schedule math: when are a job's slots? Pure functions, no broker, no clock.

Times are integer epoch milliseconds (UTC) everywhere in cronstream; a cron expression is read in
the job's IANA time zone. Six-field cron puts seconds first (``*/2 * * * * *`` = every two
seconds), as Quartz and Spring do; croniter wants seconds last, so we rotate. ``H`` fields are
hashed from the job id (Jenkins), so a thousand ``H * * * *`` jobs spread over the hour instead of
all firing at :00.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter.croniter import CroniterError


class ScheduleError(ValueError):
    """An invalid schedule; ``field`` names the offending field of the API body."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _croniter_expression(expr: str) -> str:
    fields = expr.split()
    if len(fields) == 5:
        return expr
    if len(fields) == 6:
        return " ".join(fields[1:] + fields[:1])
    raise ScheduleError("schedule.cron", f"expected 5 or 6 fields, got {len(fields)}")


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ScheduleError("schedule.timezone", f"unknown time zone {name!r}") from exc


def _cron_iter(expr: str, tz: ZoneInfo, job_id: str, after_ms: int) -> croniter:
    start = datetime.fromtimestamp(after_ms / 1000, tz=UTC).astimezone(tz)
    try:
        return croniter(_croniter_expression(expr), start, hash_id=job_id.encode())
    except (CroniterError, ValueError, KeyError) as exc:
        raise ScheduleError("schedule.cron", f"invalid cron expression {expr!r}: {exc}") from exc


def validate(schedule: dict[str, Any], job_id: str) -> None:
    """Raise ScheduleError naming the field if the schedule cannot produce slots."""
    kinds = [k for k in ("cron", "at_ms", "every_s") if schedule.get(k) is not None]
    if len(kinds) != 1:
        raise ScheduleError("schedule", "exactly one of cron, at, every_s is required")
    _zone(schedule.get("timezone") or "UTC")
    if schedule.get("cron") is not None:
        _cron_iter(schedule["cron"], _zone(schedule.get("timezone") or "UTC"), job_id, 0)
    every = schedule.get("every_s")
    if every is not None and every < 1:
        raise ScheduleError("schedule.every_s", "must be >= 1")


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
        tz = _zone(schedule.get("timezone") or "UTC")
        it = _cron_iter(schedule["cron"], tz, job_id, after_ms)
        slot = int(it.get_next(float) * 1000)
        while slot <= after_ms:  # croniter rounds to whole seconds; never return a past slot
            slot = int(it.get_next(float) * 1000)
    if slot is not None and end is not None and slot > end:
        return None
    return slot


def slots_between(schedule: dict[str, Any], job_id: str, after_ms: int, until_ms: int,
                  limit: int) -> list[int]:
    """Nominal slots in (after_ms, until_ms], at most ``limit`` of them (the earliest)."""
    out: list[int] = []
    cursor = after_ms
    while len(out) < limit:
        slot = next_after(schedule, job_id, cursor)
        if slot is None or slot > until_ms:
            break
        out.append(slot)
        cursor = slot
    return out


def fire_id(job_id: str, nominal_ms: int) -> str:
    """``job_id@nominal time`` in RFC 3339 UTC with milliseconds: the same slot, the same id."""
    stamp = datetime.fromtimestamp(nominal_ms / 1000, tz=UTC)
    return f"{job_id}@{stamp.strftime('%Y-%m-%dT%H:%M:%S')}.{nominal_ms % 1000:03d}Z"
