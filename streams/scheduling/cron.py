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
Day-of-week 0 and 7 are Sunday.

Rules by the month, as Quartz, EventBridge and croniter write them (each is one list item):
day-of-month ``L`` (the last day), ``L-n`` (n days before it), ``nW`` (the weekday, Monday to
Friday, nearest day n, never leaving the month: ``1W`` on a Saturday is Monday the 3rd; a month
shorter than n has none) and ``LW`` (the last weekday); day-of-week ``d#n`` (the n-th day d of
the month, n 1-5: ``2#2`` is the second Tuesday, ``5#5`` is missing from most months) and
``dL`` or croniter's ``Ld`` (the last day d: ``5L`` is the last Friday).

When both day fields are restricted, a day matches either, and a
day field is restricted unless it is ``*`` or ``?``: crontab(5)'s rule, and croniter's for
``*/2``. Vixie cron's code calls a field that merely starts with ``*`` unrestricted, so
``0 0 */2 * MON`` is odd days or Mondays here and odd Mondays there (tests/unit/scheduling/test_cron.py).
"""

from __future__ import annotations

import dataclasses
import re
import zlib
from bisect import bisect_left
from calendar import monthrange
from collections.abc import Callable
from dataclasses import dataclass, replace
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
# How far a search looks before it says "never". A day pattern matches or not by the layout of a
# month alone: which month, how long, the weekday of its 1st (91 layouts, and every one of them
# recurs: the Gregorian calendar repeats every 400 years, 146,097 days, a whole number of weeks).
# The longest wait for a layout is a 29-day February starting on a given weekday: 14,609 days
# (40 years, e.g. 2680 to 2720 across 2700, no leap year; ``0 0 * 2 1#5``, Feb 29 on a Monday,
# waits 2072 to 2112). So an expression that can match at all matches within 14,609 days plus the
# month in which it falls; one that cannot is refused by ``parse``. A search stops at its first
# match, so the limit costs an ordinary search nothing: only a pattern that never comes (a DST
# gap skipping every match, ``streams.scheduling.schedule``) walks that far.
SEARCH_DAYS = 14_609 + 31
_MONTH_LENGTHS = {1: (31,), 2: (29, 28), 3: (31,), 4: (30,), 5: (31,), 6: (30,), 7: (31,),
                  8: (31,), 9: (30,), 10: (31,), 11: (30,), 12: (31,)}


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
    last_days: frozenset[int] = frozenset()  # L-n: n days before the last day (L is 0)
    near_weekdays: frozenset[int] = frozenset()  # nW: the weekday nearest day n (0: LW)
    nth_weekdays: frozenset[tuple[int, int]] = frozenset()  # (weekday, n): d#n; n = -1 is dL
    # whether a day's match depends on its month (L, W, #): set once, read on every day searched
    by_month: bool = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_month",
                           bool(self.last_days or self.near_weekdays or self.nth_weekdays))

    def day_matches(self, day: datetime) -> bool:
        if self.by_month:
            return self.matches_in_month(day.day, day.weekday(),
                                         monthrange(day.year, day.month)[1])
        dom = day.day in self.days
        dow = day.weekday() in self.weekdays
        if self.dom_restricted and self.dow_restricted:
            return dom or dow
        return dom and dow

    def matches_in_month(self, day: int, weekday: int, length: int) -> bool:
        """Whether day ``day`` (a ``weekday``, 0 = Monday) of a month of ``length`` days matches;
        ``day_matches`` without the date, so ``parse`` can try every layout of a month."""
        dom = day in self.days or (length - day) in self.last_days or any(
            _nearest_weekday(n or length, weekday + (n or length) - day, length) == day
            for n in self.near_weekdays)
        dow = weekday in self.weekdays or any(
            weekday == wd and (n == (day - 1) // 7 + 1 or (n == -1 and day + 7 > length))
            for wd, n in self.nth_weekdays)
        if self.dom_restricted and self.dow_restricted:
            return dom or dow
        return dom and dow


def _nearest_weekday(day: int, weekday: int, length: int) -> int | None:
    """The weekday nearest ``day`` (whose weekday is ``weekday``, any integer, mod 7) in a month of
    ``length`` days, never leaving the month (Quartz's ``W``); None if the month has no ``day``."""
    if day > length:
        return None
    weekday %= 7
    if weekday == 5:  # Saturday: the Friday before, or Monday the 3rd for the 1st
        return day - 1 if day > 1 else day + 2
    if weekday == 6:  # Sunday: the Monday after, or the Friday before for the last day
        return day + 1 if day < length else day - 2
    return day


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


Rule = tuple[str, int, int]  # ("L", n, 0) L-n, ("W", n, 0) nW (0: LW), ("#", weekday, n) d#n, dL


def _rule(part: str, field: int) -> Rule | None:
    """The by-month rule a day field's list item spells, None for an ordinary item; a
    CronSyntaxError naming the field and the problem for a malformed one (``2#6``, ``32W``)."""
    name = _FIELDS[field][0]
    upper = part.upper()
    if field == 3 and ("L" in upper or "W" in upper):
        if "/" in upper or "-" in upper.replace("L-", "", 1):
            raise CronSyntaxError(f"{name}: {part!r}: L and W take no range or step")
        if upper == "L":
            return ("L", 0, 0)
        if upper.startswith("L-"):
            offset = upper[2:]
            if not offset.isdigit() or not 0 <= int(offset) <= 30:
                raise CronSyntaxError(f"{name}: {part!r}: L-n needs n from 0 to 30")
            return ("L", int(offset), 0)
        if upper == "LW":
            return ("W", 0, 0)
        if upper.endswith("W") and upper[:-1].isdigit():
            return ("W", _number(upper[:-1], field), 0)
        raise CronSyntaxError(f"{name}: {part!r} is not L, L-n, nW or LW")
    if field == 5 and ("#" in upper or "L" in upper):
        if "/" in upper or "-" in upper:
            raise CronSyntaxError(f"{name}: {part!r}: # and L take no range or step")
        if "#" in upper:
            day, _, nth = upper.partition("#")
            if not nth.isdigit() or not 1 <= int(nth) <= 5:
                raise CronSyntaxError(f"{name}: {part!r}: the week in d#n must be 1-5, not {nth!r}")
            return ("#", _number(day, field) % 7, int(nth))
        day = upper[:-1] if upper.endswith("L") else upper[1:]
        if not day or "L" in day:
            raise CronSyntaxError(f"{name}: {part!r}: L needs a day (5L is the last Friday)")
        return ("#", _number(day, field) % 7, -1)
    return None


def _parse_field(text: str, field: int, draw: Draw) -> set[int]:
    """The values of a field without by-month rules (``_parse_day_field`` has those)."""
    name, low, high, _ = _FIELDS[field]
    if field == 5:
        high = 6  # hashing and '*' use 0-6; an explicit 7 still means Sunday
    values: set[int] = set()
    for part in text.split(","):
        if not part:
            raise CronSyntaxError(f"{name}: empty list item in {text!r}")
        if field in (3, 5) and _rule(part, field) is not None:
            continue
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
def _rules(text: str, field: int) -> frozenset[Rule]:
    """The by-month rules of a day field (``L``, ``W``, ``#``; the same for every job)."""
    return frozenset(rule for part in text.split(",") if part and (rule := _rule(part, field)))


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
    rules = _rules(fields[3], 3) | _rules(fields[5], 5)
    spec = CronSpec(
        seconds=tuple(sorted(seconds)), minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)), days=frozenset(days), months=frozenset(months),
        weekdays=weekdays,
        dom_restricted=fields[3] not in ("*", "?"), dow_restricted=fields[5] not in ("*", "?"),
        last_days=frozenset(n for kind, n, _ in rules if kind == "L"),
        near_weekdays=frozenset(n for kind, n, _ in rules if kind == "W"),
        # cron's weekday (0 = Sunday) → Python's (0 = Monday)
        nth_weekdays=frozenset(((d - 1) % 7, n) for kind, d, n in rules if kind == "#"),
    )
    if not _some_day_matches(replace(spec, seconds=(0,), minutes=(0,), hours=(0,))):
        raise CronSyntaxError(f"{expr!r} never matches a calendar date")
    return spec


@lru_cache(maxsize=1024)
def _some_day_matches(days_only: CronSpec) -> bool:
    """Whether the day fields ever match (``0 0 30 2 *`` never does): whether some day of some
    layout of a month the expression names matches (``SEARCH_DAYS`` says why the layouts are
    enough: each of them recurs). Cached by the day fields, a third of parsing a hashed
    expression."""
    spec = days_only
    if not spec.by_month:
        if spec.dow_restricted:  # every month has every weekday (a field is never empty)
            return True
        return not spec.dom_restricted or min(spec.days) <= max(
            _MONTH_LENGTHS[month][0] for month in spec.months)
    return any(spec.matches_in_month(day, (first + day - 1) % 7, length)
               for month in sorted(spec.months) for length in _MONTH_LENGTHS[month]
               for first in range(7) for day in range(1, length + 1))


def _first_at_or_after(values: tuple[int, ...], value: int) -> int | None:
    i = bisect_left(values, value)
    return values[i] if i < len(values) else None


def next_wall(spec: CronSpec, after: datetime) -> datetime | None:
    """The first wall-clock time strictly after ``after`` (naive) that matches, or None: none
    within ``SEARCH_DAYS``, or none before the end of year 9999 (``datetime.max``)."""
    t = after.replace(microsecond=0) + timedelta(seconds=1)
    limit = after + timedelta(days=SEARCH_DAYS) if after.year < 9900 else datetime.max
    try:  # zero-cost until it raises
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
    except (OverflowError, ValueError):  # stepped past datetime.max
        return None
    return None
