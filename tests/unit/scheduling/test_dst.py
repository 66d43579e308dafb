"""DST in America/New_York, 2026: 02:00 EST → 03:00 EDT on March 8; 02:00 EDT → 01:00 EST on Nov 1."""

from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.scheduling.schedule import slots_between


def utc(text: str) -> int:
    return int(datetime.fromisoformat(text + "+00:00").timestamp() * 1000)


def iso(ms: int) -> str:
    return datetime.utcfromtimestamp(ms / 1000).strftime("%m-%d %H:%M")


def ny(cron, gap="shift", repeat="first"):
    return {"cron": cron, "timezone": "America/New_York", "dst_gap": gap, "dst_repeat": repeat}


def daily(sched, first_day_utc):
    return [iso(s) for s in slots_between(sched, "j", utc(first_day_utc), utc(first_day_utc)
                                          + 3 * 86_400_000, 10)]


def test_nonexistent_time_shifts_forward_by_default():
    # 02:30 does not exist on March 8: it runs at 03:30 EDT (07:30 UTC), once
    assert daily(ny("30 2 * * *"), "2026-03-07T00:00:00") == [
        "03-07 07:30", "03-08 07:30", "03-09 06:30"]


def test_nonexistent_time_can_be_skipped():
    assert daily(ny("30 2 * * *", gap="skip"), "2026-03-07T00:00:00") == [
        "03-07 07:30", "03-09 06:30"]


@pytest.mark.parametrize("repeat, expected", [
    ("first", ["10-31 05:30", "11-01 05:30", "11-02 06:30"]),
    ("last", ["10-31 05:30", "11-01 06:30", "11-02 06:30"]),
    ("both", ["10-31 05:30", "11-01 05:30", "11-01 06:30", "11-02 06:30"]),
])
def test_repeated_time(repeat, expected):
    # 01:30 happens twice on Nov 1: 05:30 UTC (EDT) and 06:30 UTC (EST)
    assert daily(ny("30 1 * * *", repeat=repeat), "2026-10-31T00:00:00") == expected


def test_every_minute_through_the_gap_fires_each_real_minute_once():
    slots = slots_between(ny("* * * * *"), "j", utc("2026-03-08T06:55:00"),
                          utc("2026-03-08T07:05:00"), 100)
    assert [iso(s) for s in slots] == [f"03-08 06:{m}" for m in range(56, 60)] + [
        f"03-08 07:{m:02d}" for m in range(0, 6)]


def test_every_minute_through_the_repeat_with_both_covers_both_hours():
    slots = slots_between(ny("*/30 * * * *", repeat="both"), "j", utc("2026-11-01T04:00:00"),
                          utc("2026-11-01T07:30:00"), 100)
    assert [iso(s) for s in slots] == ["11-01 04:30", "11-01 05:00", "11-01 05:30",
                                       "11-01 06:00", "11-01 06:30", "11-01 07:00", "11-01 07:30"]


def test_resuming_inside_the_repeated_hour_still_finds_the_second_occurrence():
    # the worker resumes at 01:45 EDT (05:45 UTC); 01:30 EST (06:30 UTC) is still owed
    assert slots_between(ny("30 1 * * *", repeat="both"), "j", utc("2026-11-01T05:45:00"),
                         utc("2026-11-01T23:00:00"), 5) == [utc("2026-11-01T06:30:00")]


@settings(max_examples=40, deadline=None)
@given(start=st.integers(utc("2026-03-07T20:00:00"), utc("2026-03-08T12:00:00")) |
       st.integers(utc("2026-10-31T20:00:00"), utc("2026-11-01T12:00:00")),
       expr=st.sampled_from(["*/10 * * * *", "30 1 * * *", "30 2 * * *", "0 * * * *",
                             "*/20 * * * * *"]),
       gap=st.sampled_from(["shift", "skip"]), repeat=st.sampled_from(["first", "last", "both"]))
def test_slots_increase_across_transitions(start, expr, gap, repeat):
    slots = slots_between(ny(expr, gap, repeat), "j", start, start + 6 * 3600_000, 50)
    assert all(b > a for a, b in zip(slots, slots[1:], strict=False))
    assert all(s > start for s in slots)
