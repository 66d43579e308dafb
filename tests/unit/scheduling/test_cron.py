import zlib
from datetime import datetime

import pytest

from streams.scheduling.cron import CronSyntaxError, draws, hashed, next_wall, parse, parse_drawn


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
