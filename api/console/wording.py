"""A cron expression in words, for people reading a schedule (the web console, job listings).

Why from the parsed values and not the text: ``*/15``, ``0-59/15`` and ``0,15,30,45`` are the same
schedule and should read the same, and what a person wants to know is when the job runs, not how
the expression was spelled. Only ``H`` is read from the text: its values depend on the job id, so
without one the words say "a minute fixed per job" rather than a minute that would be wrong for
every other job. Pure: no clock, no time zone (the console shows the zone beside the words).

    >>> describe("0 9 * * 2#2")
    'at 09:00 on the second Tuesday of every month'
    >>> describe("*/5 * * * *")
    'every 5 minutes'
"""

from __future__ import annotations

from collections.abc import Sequence

from streams.scheduling import cron

_MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August",
                "September", "October", "November", "December")
_DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_NTH = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", -1: "last"}
_UNITS = ("second", "minute", "hour")
_TIMES_LISTED = 4  # up to this many times of day are listed as clock times ("at 09:00 and 17:00")


def describe(expr: str, job_id: str | None = None) -> str:
    """``expr`` in words, e.g. "at 12:00 on the last day of the month"; ``job_id`` fixes the
    values of its ``H`` fields (without it they read "fixed per job"). Raises
    ``cron.CronSyntaxError`` for an expression ``cron.parse`` refuses."""
    spec = cron.parse(expr, job_id or "")
    fields = expr.split()
    if len(fields) == 5:
        fields = ["0", *fields]
    unknown = {i for i in range(6) if job_id is None and cron.hashed(fields[i])}
    words = [_hashed_time(spec, fields, unknown) if unknown & {0, 1, 2} else _time(spec)]
    day = _days(spec, fields, unknown)
    if day:
        words.append(day)
    return " ".join(words)


def _join(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _step(values: Sequence[int], low: int, high: int) -> int | None:
    """n when ``values`` are every n-th value of the field from its first (``*/n``), else None."""
    if len(values) < 2 or values[0] != low:
        return None
    step = values[1] - values[0]
    return step if list(values) == list(range(low, high + 1, step)) else None


def _range(values: Sequence[int]) -> bool:
    """Whether ``values`` run without a gap (``a-b``), and are more than two."""
    return len(values) > 2 and list(values) == list(range(values[0], values[-1] + 1))


def _cycle(values: Sequence[int], unit: int, high: int) -> str:
    """A field of the time of day that is not a single value: "every 5 minutes", "at minutes 15
    and 45", "from 08:00 through 18:59"."""
    name = _UNITS[unit]
    step = _step(values, 0, high)
    if step == 1:
        return f"every {name}"
    if step:
        return f"every {step} {name}s"
    if unit == 2 and _range(values):
        return f"from {values[0]:02d}:00 through {values[-1]:02d}:59"
    return f"at {name}s {_join([str(v) for v in values])}"


def _time(spec: cron.CronSpec) -> str:
    seconds, minutes, hours = spec.seconds, spec.minutes, spec.hours
    if len(seconds) * len(minutes) * len(hours) <= _TIMES_LISTED:
        shown = [f"{h:02d}:{m:02d}" + (f":{s:02d}" if seconds != (0,) else "")
                 for h in hours for m in minutes for s in seconds]
        return f"at {_join(shown)}"
    parts: list[str] = []
    if seconds != (0,):
        parts.append(_cycle(seconds, 0, 59) if len(seconds) > 1
                     else f"at {seconds[0]} seconds past the minute")
    every_minute = len(minutes) == 60
    if not (every_minute and parts):
        if len(minutes) == 1:
            parts.append(f"at {minutes[0]} minutes past the hour" if minutes[0]
                         else ("every hour" if len(hours) == 24 else "on the hour"))
        else:
            parts.append(_cycle(minutes, 1, 59))
    if len(hours) < 24:
        if len(hours) == 1:
            parts.append(f"from {hours[0]:02d}:00 through {hours[0]:02d}:59")
        elif minutes == (0,) and (step := _step(hours, 0, 23)):
            parts[-1] = f"every {step} hours"
        else:
            parts.append(_cycle(hours, 2, 23))
    return ", ".join(parts)


def _hashed_time(spec: cron.CronSpec, fields: list[str], unknown: set[int]) -> str:
    """The time of an ``H`` expression read without a job id: which fields the job fixes
    ("every 15 minutes, from a minute fixed per job"), the others as ``_time`` says them."""
    parts: list[str] = []
    for unit in (0, 1, 2):
        name, values = _UNITS[unit], (spec.seconds, spec.minutes, spec.hours)[unit]
        if unit in unknown:
            _, _, step = fields[unit].partition("/")
            bounds = fields[unit].upper().partition("(")[2].rstrip(")").split("/")[0]
            within = f" ({bounds.replace('-', ' to ')})" if bounds else ""
            parts.append(f"every {step} {name}s, from a {name} fixed per job{within}" if step
                         else f"at a{'n' if name == 'hour' else ''} {name} fixed per job{within}")
        elif unit == 0 and values == (0,):
            continue
        elif len(values) == 1:
            parts.append(f"at {name} {values[0]}")
        elif len(values) < (60, 60, 24)[unit]:
            parts.append(_cycle(values, unit, (59, 59, 23)[unit]))
    return ", ".join(parts)


def _days(spec: cron.CronSpec, fields: list[str], unknown: set[int]) -> str:
    """The day part: "on the last day of the month", "on weekdays in July", "" for every day."""
    months = sorted(spec.months)
    month_words = "" if len(months) == 12 else _months(months)
    dom = [] if not spec.dom_restricted else _dom_phrases(spec, 3 in unknown)
    dow = ("", []) if not spec.dow_restricted else _dow_phrases(spec, 5 in unknown)
    if not dom and not dow[0] and not dow[1]:
        return f"in {month_words}" if month_words else ""
    phrases = []
    if dom:
        phrases.append(f"on {_join(dom)} of {month_words or 'the month'}")
    plain_days, nth_days = dow
    if nth_days:
        phrases.append(f"on {_join(nth_days)} of {month_words or 'every month'}")
    if plain_days:
        phrases.append(f"on {plain_days}" + (f" in {month_words}" if month_words else ""))
    return " or ".join(phrases)


def _months(months: list[int]) -> str:
    if _range(months):
        return f"{_MONTH_NAMES[months[0] - 1]} through {_MONTH_NAMES[months[-1] - 1]}"
    if len(months) > 2 and (step := _step(months, 1, 12)) and step > 1:
        return f"every {_ordinal(step)} month from January"
    return _join([_MONTH_NAMES[m - 1] for m in months])


def _dom_phrases(spec: cron.CronSpec, hashed: bool) -> list[str]:
    days = sorted(spec.days)
    phrases: list[str] = []
    if hashed:
        phrases.append("a day fixed per job")
    elif days:
        step = _step(days, 1, 31)
        if step and step > 1:
            phrases.append(f"every {_ordinal(step)} day from the 1st")
        elif step == 1:
            phrases.append("every day")
        elif _range(days):
            phrases.append(f"the {_ordinal(days[0])} through the {_ordinal(days[-1])}")
        else:
            phrases.append("the " + _join([_ordinal(d) for d in days]))
    for n in sorted(spec.near_weekdays):
        phrases.append("the last weekday" if n == 0 else f"the weekday nearest the {_ordinal(n)}")
    for n in sorted(spec.last_days):
        phrases.append("the last day" if n == 0 else f"the {_ordinal(n + 1)}-to-last day")
    return phrases


def _dow_phrases(spec: cron.CronSpec, hashed: bool) -> tuple[str, list[str]]:
    """Plain weekdays ("Monday through Friday", "Sundays"; "" for none) and n-th ones ("the
    second Tuesday"), which take the month after them."""
    weekdays = sorted(spec.weekdays)
    plain = ""
    if hashed:
        plain = "a day of the week fixed per job"
    elif weekdays == [0, 1, 2, 3, 4]:
        plain = "weekdays"
    elif weekdays == [5, 6]:
        plain = "weekends"
    elif len(weekdays) == 7:
        plain = "every day of the week"
    elif _range(weekdays):
        plain = f"{_DAY_NAMES[weekdays[0]]} through {_DAY_NAMES[weekdays[-1]]}"
    elif weekdays:
        plain = _join([f"{_DAY_NAMES[d]}s" for d in weekdays])
    nth = [f"the {_NTH[n]} {_DAY_NAMES[weekday]}"
           for weekday, n in sorted(spec.nth_weekdays, key=lambda rule: (rule[1] % 6, rule[0]))]
    return plain, nth
