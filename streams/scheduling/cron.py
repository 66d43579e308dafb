"""A cron engine: parse once, then find the next matching wall-clock time in microseconds.

Why our own and not croniter (docs/architecture.md has the whole case): the scheduler computes one
next time per fire (10k fires/s) and one per job when it takes over a partition (1M jobs), and
ours takes 15 µs where croniter 5.0.1 takes 37 µs reusing one object per expression and 96 µs
building one per search, as cronstream once did (``bench/cron.py``, 2026-11-25); croniter's DST
arithmetic holds only for pytz zones away from an offset change, with no policy for gaps and
repeats, and it has calendar bugs of its own (``tests/unit/scheduling/test_cron_vs_croniter.py`` names
each). This module does calendar math on naive wall-clock times only;
``streams.scheduling.schedule`` turns wall times into instants with the DST policy.

Fields: ``[second] minute hour day-of-month month day-of-week``. Six fields put seconds first
(Quartz, Spring). Each field takes ``*``, ``?``, numbers, names (``JAN``, ``MON``), ranges
``a-b``, steps ``*/n`` and ``a-b/n``, lists ``a,b``, and Jenkins' hashed ``H``, ``H(a-b)``,
``H/n``: a value fixed per job (from the job id), so many ``H * * * *`` jobs spread over the hour.
Day-of-week 0 and 7 are Sunday. When both day fields are restricted, a day matches either, and a
day field is restricted unless it is ``*`` or ``?``: crontab(5)'s rule, and croniter's for
``*/2``. Vixie cron's code calls a field that merely starts with ``*`` unrestricted, so
``0 0 */2 * MON`` is odd days or Mondays here and odd Mondays there (tests/unit/scheduling/test_cron.py).
"""

from __future__ import annotations

import re
import zlib
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache

_MONTHS = {m: i + 1 for i, m in enumerate(
    ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"])}
_DAYS = {d: i for i, d in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}

# (name, low, high, names)
_FIELDS = (
    ("second", 0, 59, {}),
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)
_HASHED = re.compile(r"(?<![A-Z])H(?![A-Z])")  # H, H(a-b), H/n — not the H of THU
SEARCH_YEARS = 8  # long enough for Feb 29 on a given weekday; beyond it the expression never fires


class CronSyntaxError(ValueError):
    pass


@dataclass(frozen=True)
class CronSpec:
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Monday … 6 = Sunday (Python's weekday())
    dom_restricted: bool
    dow_restricted: bool

    def day_matches(self, day: datetime) -> bool:
        dom = day.day in self.days
        dow = day.weekday() in self.weekdays
        if self.dom_restricted and self.dow_restricted:
            return dom or dow
        return dom and dow


def _number(text: str, field: int) -> int:
    name, low, high, names = _FIELDS[field]
    upper = text.upper()
    if upper in names:
        return names[upper]
    if not text.isdigit():
        raise CronSyntaxError(f"{name}: {text!r} is not a number")
    value = int(text)
    if not low <= value <= high:
        raise CronSyntaxError(f"{name}: {value} is outside {low}-{high}")
    return value


def _hash(job_id: str, field: int, span: int) -> int:
    return zlib.crc32(f"{job_id}#{field}".encode()) % span


Draw = Callable[[int, int], int]  # (field, span) -> the job's H value in range(span)


def _parse_field(text: str, field: int, draw: Draw) -> set[int]:
    name, low, high, _ = _FIELDS[field]
    if field == 5:
        high = 6  # hashing and '*' use 0-6; an explicit 7 still means Sunday
    values: set[int] = set()
    for part in text.split(","):
        if not part:
            raise CronSyntaxError(f"{name}: empty list item in {text!r}")
        base, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronSyntaxError(f"{name}: step {step_text!r} must be a positive number")
            step = int(step_text)
        if base in ("*", "?"):
            start, end = low, high
        elif base.upper() == "H" or base.upper().startswith("H("):
            h_low, h_high = low, high
            if base.upper().startswith("H("):
                if not base.endswith(")") or "-" not in base:
                    raise CronSyntaxError(f"{name}: expected H(a-b), got {base!r}")
                a, _, b = base[2:-1].partition("-")
                h_low, h_high = _number(a, field), _number(b, field)
                if h_low > h_high:
                    raise CronSyntaxError(f"{name}: empty range {base!r}")
            if step_text:
                start = h_low + draw(field, min(step, h_high - h_low + 1))
                end = h_high
            else:
                values.add(h_low + draw(field, h_high - h_low + 1))
                continue
        elif "-" in base:
            a, _, b = base.partition("-")
            start, end = _number(a, field), _number(b, field)
            if start > end:
                raise CronSyntaxError(f"{name}: range {base!r} runs backwards")
        else:
            start = _number(base, field)
            end = high if step_text else start
        values.update(range(start, end + 1, step))
    return values


def hashed(text: str) -> bool:
    """Whether an expression (or one field of it) has an ``H``: only then does the job id count."""
    return _HASHED.search(text.upper()) is not None


def _undrawn(field: int, span: int) -> int:
    raise AssertionError(f"field {field} has no H")  # hashed() decides which fields draw


@lru_cache(maxsize=1024)
def _plain_field(text: str, field: int) -> frozenset[int]:
    """A field without ``H`` is the same for every job: of a hashed expression (one per job, a
    million on a restart) only its ``H`` fields are parsed again."""
    return frozenset(_parse_field(text, field, _undrawn))


def _fields(expr: str, draw: Draw) -> tuple[list[str], list[set[int] | frozenset[int]]]:
    fields = expr.split()
    if len(fields) == 5:
        fields = ["0", *fields]
    elif len(fields) != 6:
        raise CronSyntaxError(f"expected 5 or 6 fields, got {len(fields)}")
    return fields, [_parse_field(text, i, draw) if hashed(text) else _plain_field(text, i)
                    for i, text in enumerate(fields)]


@lru_cache(maxsize=1024)
def _hash_plan(expr: str) -> tuple[tuple[int, int], ...]:
    """(field, span) of each ``H`` value ``expr`` draws, in parsing order: the text decides them,
    the job id only picks the values."""
    plan: list[tuple[int, int]] = []

    def record(field: int, span: int) -> int:
        plan.append((field, span))
        return 0

    _fields(expr, record)
    return tuple(plan)


def draws(expr: str, job_id: str) -> tuple[int, ...]:
    """The values ``job_id``'s ``H`` fields take in ``expr`` (empty without ``H``). Jobs that draw
    the same values have the same schedule: a million ``H H 1 1 *`` jobs are at most 1,440
    schedules, so ``streams.scheduling.schedule`` caches parsing and next-slot searches by draws, not by job,
    and a restart indexing every job searches once per schedule instead of once per job."""
    return tuple(_hash(job_id, field, span) for field, span in _hash_plan(expr))


def parse(expr: str, job_id: str = "") -> CronSpec:
    """Parse a 5- or 6-field expression; ``job_id`` seeds the ``H`` fields."""
    return parse_drawn(expr, draws(expr, job_id))


def parse_drawn(expr: str, drawn: tuple[int, ...]) -> CronSpec:
    """Parse an expression whose ``H`` fields take the values ``drawn`` (``draws``)."""
    values = iter(drawn)
    fields, parsed = _fields(expr, lambda _field, _span: next(values))
    seconds, minutes, hours, days, months, dows = parsed
    weekdays = frozenset((d - 1) % 7 for d in dows)  # cron 0/7=Sun → Python 6, 1=Mon → 0
    spec = CronSpec(
        seconds=tuple(sorted(seconds)), minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)), days=frozenset(days), months=frozenset(months),
        weekdays=weekdays,
        dom_restricted=fields[3] not in ("*", "?"), dow_restricted=fields[5] not in ("*", "?"),
    )
    if not _some_day_matches(spec.days, spec.months, spec.weekdays, spec.dom_restricted,
                             spec.dow_restricted):
        raise CronSyntaxError(f"{expr!r} never matches a calendar date")
    return spec


@lru_cache(maxsize=1024)
def _some_day_matches(days: frozenset[int], months: frozenset[int], weekdays: frozenset[int],
                      dom_restricted: bool, dow_restricted: bool) -> bool:
    """Whether the day fields ever match (``0 0 30 2 *`` never does). Every time field has a
    value, so the days decide; cached by them, a third of parsing a hashed expression."""
    days_only = CronSpec((0,), (0,), (0,), days, months, weekdays, dom_restricted, dow_restricted)
    return next_wall(days_only, datetime(2000, 1, 1)) is not None


def _first_at_or_after(values: tuple[int, ...], value: int) -> int | None:
    i = bisect_left(values, value)
    return values[i] if i < len(values) else None


def next_wall(spec: CronSpec, after: datetime) -> datetime | None:
    """The first wall-clock time strictly after ``after`` (naive) that matches, or None."""
    t = after.replace(microsecond=0) + timedelta(seconds=1)
    limit = after + timedelta(days=366 * SEARCH_YEARS)
    while t <= limit:
        if t.month not in spec.months:
            year, month = (t.year + 1, 1) if t.month == 12 else (t.year, t.month + 1)
            t = datetime(year, month, 1)
            continue
        if not spec.day_matches(t):
            t = datetime(t.year, t.month, t.day) + timedelta(days=1)
            continue
        hour = _first_at_or_after(spec.hours, t.hour)
        if hour is None:
            t = datetime(t.year, t.month, t.day) + timedelta(days=1)
            continue
        if hour != t.hour:
            t = t.replace(hour=hour, minute=0, second=0)
        minute = _first_at_or_after(spec.minutes, t.minute)
        if minute is None:
            t = t.replace(minute=0, second=0) + timedelta(hours=1)
            continue
        if minute != t.minute:
            t = t.replace(minute=minute, second=0)
        second = _first_at_or_after(spec.seconds, t.second)
        if second is None:
            t = t.replace(second=0) + timedelta(minutes=1)
            continue
        return t.replace(second=second)
    return None
