import calendar
import itertools
import re
import zlib
from datetime import date, datetime

import pytest

from streams.scheduling.cron import (
    SEARCH_DAYS,
    CronSyntaxError,
    draws,
    hashed,
    next_wall,
    parse,
    parse_drawn,
)


def nxt(expr, after, job="j"):
    return next_wall(parse(expr, job), datetime.fromisoformat(after))


@pytest.mark.parametrize("expr, after, expected", [
    ("*/15 * * * * *", "2026-01-01T00:00:14", "2026-01-01T00:00:15"),
    ("0 9 * * MON-FRI", "2026-01-02T10:00:00", "2026-01-05T09:00:00"),
    ("0 0 29 2 *", "2026-01-01T00:00:00", "2028-02-29T00:00:00"),
    ("0 0 1,15 * *", "2026-01-02T00:00:00", "2026-01-15T00:00:00"),
    ("0 12 * JAN,jul *", "2026-02-01T00:00:00", "2026-07-01T12:00:00"),
    ("0 0 * * 7", "2026-01-01T00:00:00", "2026-01-04T00:00:00"),  # 7 = Sunday
    ("0 0 * * 0", "2026-01-01T00:00:00", "2026-01-04T00:00:00"),
    ("0 0 13 * FRI", "2026-01-01T00:00:00", "2026-01-02T00:00:00"),  # dom OR dow
    ("5-10/5 * * * *", "2026-01-01T00:06:00", "2026-01-01T00:10:00"),
    ("59 23 31 12 *", "2026-12-31T23:59:00", "2027-12-31T23:59:00"),
])
def test_next_wall(expr, after, expected):
    assert nxt(expr, after) == datetime.fromisoformat(expected)


def test_microseconds_are_dropped_and_result_is_strictly_after():
    assert nxt("* * * * * *", "2026-01-01T00:00:00.999999") == datetime(2026, 1, 1, 0, 0, 1)


def test_hashed_fields_stay_in_range():
    for i in range(300):
        spec = parse("H H(9-17) * * *", f"job-{i}")
        assert spec.minutes[0] in range(60) and spec.hours[0] in range(9, 18)
        step = parse("H/15 * * * *", f"job-{i}").minutes
        assert len(step) == 4 and step[0] < 15
        assert all(b - a == 15 for a, b in zip(step, step[1:], strict=False))


def test_a_jobs_h_values_are_its_crc32_draws_and_decide_its_spec():
    """The values are pinned: changing them would move every existing hashed job's slots."""
    for i in range(200):
        job = f"job-{i}"
        minute, hour = (zlib.crc32(f"{job}#{field}".encode()) % span
                        for field, span in ((1, 60), (2, 9)))
        assert draws("H H(9-17) * * *", job) == (minute, hour)
        spec = parse("H H(9-17) * * *", job)
        assert (spec.minutes, spec.hours) == ((minute,), (9 + hour,))
        assert parse_drawn("H H(9-17) * * *", (minute, hour)) == spec
        assert draws("H/15 * * * *", job) == (zlib.crc32(f"{job}#1".encode()) % 15,)
    assert draws("0 9 * * MON-THU", "job-1") == ()


def test_jobs_of_a_hashed_expression_are_few_schedules():
    """What lets a restart search once per schedule instead of once per job."""
    assert len({draws("H H 1 1 *", f"job-{i}") for i in range(20_000)}) <= 24 * 60


@pytest.mark.parametrize("expr", ["", "* * * *", "* * * * * * *", "60 * * * *", "* 24 * * *",
                                  "* * 0 * *", "* * * 13 *", "* * * * 8", "*/0 * * * *",
                                  "5-1 * * * *", "a * * * *", "1,,2 * * * *", "0 0 31 2 *",
                                  "H(5-1) * * * *", "H(1 * * * *"])
def test_rejects(expr):
    with pytest.raises(CronSyntaxError):
        parse(expr, "j")


def test_a_hashed_day_is_checked_against_the_calendar_for_each_job():
    """February 30-31 never comes, whichever day the hash picks; Feb 28-29 always can."""
    for i in range(20):
        with pytest.raises(CronSyntaxError):
            parse("0 0 H(30-31) 2 *", f"job-{i}")
        assert parse("0 0 H(28-29) 2 *", f"job-{i}").months == frozenset({2})


@pytest.mark.parametrize("expr, is_hashed", [("H * * * *", True), ("h/5 * * * *", True),
                                             ("0 H(9-17) * * *", True), ("0 9 * * MON-THU", False),
                                             ("0 9 * * thu", False), ("0 0 1 1 *", False)])
def test_only_an_h_of_its_own_makes_an_expression_hashed(expr, is_hashed):
    """THU is not hashed: jobs of ``0 9 * * MON-THU`` share their parse and next-slot searches."""
    assert hashed(expr) is is_hashed


@pytest.mark.parametrize("expr, after, expected", [
    # odd days OR Mondays: Wed Jan 7 (Vixie cron's code, reading "*/2" as unrestricted, would
    # wait for an odd Monday, Jan 19)
    ("0 0 */2 * MON", "2026-01-05T00:00:00", "2026-01-07T00:00:00"),
    # days 1-31 OR even weekdays: every day, Wed Jan 7 (Vixie's code: Thu Jan 8)
    ("0 0 1-31 * */2", "2026-01-06T00:00:00", "2026-01-07T00:00:00"),
    # June 31 never comes, June's Mondays do (croniter raises here)
    ("0 0 31 6 MON", "2026-01-01T00:00:00", "2026-06-01T00:00:00"),
    ("0 0 ? * MON", "2026-01-06T00:00:00", "2026-01-12T00:00:00"),  # '?' is '*'
])
def test_a_day_field_is_restricted_unless_it_is_a_bare_star(expr, after, expected):
    """When both day fields are restricted a day matches either; a field is restricted unless it
    is ``*`` or ``?``, as crontab(5) words it ("restricted (ie, aren't *)") and as croniter reads
    ``*/2``. Vixie cron's code tests the field's first character instead, so there a day field
    such as ``*/2`` turns the OR into an AND. Pinned: changing the rule would move the slots of
    every existing job with such an expression."""
    assert nxt(expr, after) == datetime.fromisoformat(expected)


@pytest.mark.parametrize("expr, after, expected", [
    ("0 12 L * *", "2026-02-01T00:00:00", "2026-02-28T12:00:00"),  # the last day
    ("0 12 L 2 *", "2028-01-01T00:00:00", "2028-02-29T12:00:00"),  # of a leap February
    ("0 0 L-2 * *", "2026-03-01T00:00:00", "2026-03-29T00:00:00"),  # 2 days before the last
    ("0 0 1,L * *", "2026-01-02T00:00:00", "2026-01-31T00:00:00"),
    ("0 0 15W * *", "2026-02-01T00:00:00", "2026-02-16T00:00:00"),  # Sun 15th → Mon 16th
    ("0 0 15W * *", "2026-08-01T00:00:00", "2026-08-14T00:00:00"),  # Sat 15th → Fri 14th
    ("0 0 15W * *", "2026-04-01T00:00:00", "2026-04-15T00:00:00"),  # a Wednesday stays
    ("0 0 1W * *", "2026-07-31T00:00:00", "2026-08-03T00:00:00"),  # Sat 1st → Mon 3rd, not Jul 31
    ("0 0 31W * *", "2026-05-01T00:00:00", "2026-05-29T00:00:00"),  # Sun 31st → Fri 29th
    ("0 0 31W * *", "2026-04-01T00:00:00", "2026-05-29T00:00:00"),  # April has no 31st
    ("0 0 LW * *", "2026-05-01T00:00:00", "2026-05-29T00:00:00"),  # Sun 31st → Fri 29th
    ("0 0 LW * *", "2026-03-01T00:00:00", "2026-03-31T00:00:00"),
    ("0 9 * * 2#2", "2026-01-01T00:00:00", "2026-01-13T09:00:00"),  # the second Tuesday
    ("0 9 * * TUE#2", "2026-01-13T09:00:00", "2026-02-10T09:00:00"),
    ("0 0 * * 5#5", "2026-02-01T00:00:00", "2026-05-29T00:00:00"),  # no 5th Friday Feb-Apr
    ("0 0 * * 7#1", "2026-01-01T00:00:00", "2026-01-04T00:00:00"),  # 7 is Sunday here too
    ("0 0 * * 1#2,3#4", "2026-01-13T00:00:00", "2026-01-28T00:00:00"),
    ("0 0 * * 5L", "2026-01-01T00:00:00", "2026-01-30T00:00:00"),  # the last Friday
    ("0 0 * * L5", "2026-01-30T00:00:00", "2026-02-27T00:00:00"),  # croniter's spelling
    ("0 0 * * fril", "2026-01-30T00:00:00", "2026-02-27T00:00:00"),
    ("0 0 * * 1,5L", "2026-01-27T00:00:00", "2026-01-30T00:00:00"),  # Mondays or the last Friday
    # both day fields restricted: either matches, as for plain values (croniter differs, see
    # test_cron_vs_croniter.py)
    ("0 0 L * 5#5", "2026-01-30T00:00:00", "2026-01-31T00:00:00"),
    ("0 0 * 2 1#5", "2026-01-01T00:00:00", "2044-02-29T00:00:00"),  # Feb 29 on a Monday
    ("0 0 * 2 1#5", "2072-02-29T00:00:00", "2112-02-29T00:00:00"),  # 40 years: 2100 is no leap year
    ("0 0 29 2 *", "2096-02-29T00:00:00", "2104-02-29T00:00:00"),  # 8 years, for the same reason
])
def test_by_month_rules(expr, after, expected):
    assert nxt(expr, after) == datetime.fromisoformat(expected)


@pytest.mark.parametrize("expr, says", [
    ("0 0 * * 2#6", "day of week: '2#6': the week in d#n must be 1-5"),
    ("0 0 * * 2#0", "day of week: '2#0': the week in d#n must be 1-5"),
    ("0 0 * * 8#1", "day of week: 8 is outside 0-7"),
    ("0 0 * * L", "day of week: 'L': L needs a day"),
    ("0 0 * * 1-5#2", "day of week: '1-5#2': # and L take no range or step"),
    ("0 0 32W * *", "day of month: 32 is outside 1-31"),
    ("0 0 0W * *", "day of month: 0 is outside 1-31"),
    ("0 0 L-31 * *", "day of month: 'L-31': L-n needs n from 0 to 30"),
    ("0 0 L/2 * *", "day of month: 'L/2': L and W take no range or step"),
    ("0 0 10-L * *", "day of month: '10-L': L and W take no range or step"),
    ("0 0 W * *", "day of month: 'W' is not L, L-n, nW or LW"),
    ("0 0 30W 2 *", "never matches a calendar date"),
    ("0 0 * 2 1#6", "the week in d#n must be 1-5"),
])
def test_a_bad_rule_is_refused_naming_the_field_and_the_problem(expr, says):
    with pytest.raises(CronSyntaxError, match=re.escape(says)):
        parse(expr, "j")


def test_the_search_horizon_covers_the_longest_wait_of_any_expression():
    """``SEARCH_DAYS``: whether a day matches depends only on its month's layout (month, length,
    weekday of the 1st); over the 400-year Gregorian cycle (which then repeats) every layout
    recurs, at most 14,609 days apart (a leap February on a given weekday, across a century
    that is not a leap year). A match can be up to a month into its layout's month."""
    seen: dict[tuple[int, int, int], list[date]] = {}
    for year in range(2000, 2800):  # two cycles: the gaps across the cycle's end count too
        for month in range(1, 13):
            first, length = calendar.monthrange(year, month)
            seen.setdefault((month, length, first), []).append(date(year, month, 1))
    assert len(seen) == 11 * 7 + 2 * 7  # every layout occurs: parse's check may try them all
    longest = max((b - a).days for starts in seen.values() for a, b in itertools.pairwise(starts))
    assert longest == 14_609
    assert longest + 31 <= SEARCH_DAYS


def test_a_search_past_the_last_representable_day_finds_nothing():
    assert next_wall(parse("0 0 * 2 1#5"), datetime(9990, 1, 1)) is None
    assert next_wall(parse("59 23 31 12 *"), datetime(9999, 12, 31, 23, 59)) is None
