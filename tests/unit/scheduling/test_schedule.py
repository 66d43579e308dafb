from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.scheduling import schedule
from streams.scheduling.schedule import ScheduleError, fire_id, next_after, slots_between


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def test_six_fields_put_seconds_first():
    s = {"cron": "*/2 * * * * *", "timezone": "UTC"}
    after = ms("2026-01-01T00:00:00.500+00:00")
    assert slots_between(s, "j", after, after + 6000, 10) == [
        ms("2026-01-01T00:00:02+00:00"), ms("2026-01-01T00:00:04+00:00"),
        ms("2026-01-01T00:00:06+00:00")]


def test_five_fields_are_minutes():
    s = {"cron": "30 9 * * *", "timezone": "UTC"}
    assert next_after(s, "j", ms("2026-01-01T10:00:00+00:00")) == ms("2026-01-02T09:30:00+00:00")


def test_cron_is_read_in_the_job_time_zone():
    s = {"cron": "0 9 * * *", "timezone": "America/New_York"}
    assert next_after(s, "j", ms("2026-01-01T00:00:00+00:00")) == ms("2026-01-01T14:00:00+00:00")


def test_hashed_minute_is_stable_per_job_and_spreads_jobs():
    s = {"cron": "H * * * *", "timezone": "UTC"}
    start = ms("2026-01-01T00:00:00+00:00")
    first = next_after(s, "job-a", start)
    assert first == next_after(s, "job-a", start)
    minutes = {datetime.fromtimestamp(next_after(s, f"job-{i}", start) / 1000, UTC).minute
               for i in range(200)}
    assert len(minutes) > 30


def test_jobs_share_a_search_only_when_expression_zone_and_dst_policy_agree():
    after = ms("2026-11-01T04:00:00+00:00")  # 00:00 EDT on New York's fall-back day
    schedule._next_cron_from.cache_clear()
    utc = next_after({"cron": "30 1 * * *", "timezone": "UTC"}, "a", after)
    first = next_after({"cron": "30 1 * * *", "timezone": "America/New_York"}, "b", after)
    last = next_after({"cron": "30 1 * * *", "timezone": "America/New_York",
                       "dst_repeat": "last"}, "c", after)
    again = next_after({"cron": "30 1 * * *", "timezone": "America/New_York"}, "d", after)
    assert (utc, first, last) == (ms("2026-11-02T01:30:00+00:00"),
                                  ms("2026-11-01T05:30:00+00:00"), ms("2026-11-01T06:30:00+00:00"))
    assert again == first
    assert schedule._next_cron_from.cache_info().hits == 1


def test_every_and_at_and_end():
    every = {"every_s": 10, "start_ms": 1_000}
    assert slots_between(every, "j", 0, 30_000, 10) == [1_000, 11_000, 21_000]
    at = {"at_ms": 5_000}
    assert next_after(at, "j", 0) == 5_000
    assert next_after(at, "j", 5_000) is None
    ended = {"every_s": 1, "start_ms": 0, "end_ms": 2_500}
    assert slots_between(ended, "j", 0, 10_000, 10) == [1_000, 2_000]


@pytest.mark.parametrize("sched, field", [
    ({"cron": "61 * * * *"}, "schedule.cron"),
    ({"cron": "* * *"}, "schedule.cron"),
    ({"cron": "not a cron"}, "schedule.cron"),
    ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "schedule.timezone"),
    ({"every_s": 0}, "schedule.every_s"),
    ({}, "schedule"),
    ({"cron": "* * * * *", "at_ms": 1}, "schedule"),
])
def test_invalid_schedules_name_the_field(sched, field):
    with pytest.raises(ScheduleError) as err:
        schedule.validate(sched, "j")
    assert err.value.field == field


def test_fire_id_is_deterministic_rfc3339_utc():
    assert fire_id("j1", ms("2026-03-08T07:00:02.250+00:00")) == "j1@2026-03-08T07:00:02.250Z"


@settings(max_examples=60, deadline=None)
@given(
    expr=st.sampled_from(["*/2 * * * * *", "*/7 * * * *", "0 0 * * *", "H/5 * * * *",
                          "15 2 * * 0", "0 */3 * * * *"]),
    tz=st.sampled_from(["UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata"]),
    after=st.integers(min_value=ms("2020-01-01T00:00:00+00:00"),
                      max_value=ms("2030-01-01T00:00:00+00:00")),
)
def test_slots_are_strictly_increasing_and_after_the_cursor(expr, tz, after):
    s = {"cron": expr, "timezone": tz}
    slots = slots_between(s, "job", after, after + 40 * 86_400_000, 5)
    assert slots, "every expression here fires at least weekly"
    assert slots[0] > after
    assert all(b > a for a, b in zip(slots, slots[1:], strict=False))
    assert all(slot % 1000 == 0 for slot in slots)


@given(st.integers(min_value=-10**12, max_value=4 * 10**12))
def test_fire_id_names_the_exact_utc_millisecond_of_any_slot(nominal_ms):
    stamp = datetime.fromtimestamp(nominal_ms / 1000, tz=UTC)
    expected = stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert fire_id("j", nominal_ms) == f"j@{expected}"


def test_hashed_jobs_that_draw_the_same_values_share_one_search():
    """A restart indexes every job: 5,000 ``H H 1 1 *`` jobs cost at most one search per
    distinct (minute, hour), and each answer is the one an uncached search gives."""
    after = 1_795_520_438_000
    sched = {"cron": "H H 1 1 *", "timezone": "Europe/Paris"}
    schedule._next_cron_from.cache_clear()
    got = {f"job-{i}": next_after(sched, f"job-{i}", after) for i in range(5_000)}
    distinct = {schedule.cron.draws("H H 1 1 *", job) for job in got}
    assert schedule._next_cron_from.cache_info().misses == len(distinct) < 1_500
    for job, slot in list(got.items())[:300]:
        assert slot == schedule._next_cron_from.__wrapped__(
            "H H 1 1 *", schedule.cron.draws("H H 1 1 *", job), "Europe/Paris", "shift", "first",
            after)
        wall = datetime.fromtimestamp(slot / 1000, schedule.zone("Europe/Paris"))
        assert (wall.month, wall.day) == (1, 1) and wall > datetime.fromtimestamp(after / 1000, UTC)


def test_without_a_bound_slots_between_gives_every_slot_asked_for():
    """The preview of a yearly job's 20 slots spans 20 years, a leap-day job's 80."""
    after = ms("2026-06-01T00:00:00+00:00")
    yearly = slots_between({"cron": "0 0 1 1 *", "timezone": "UTC"}, "j", after, None, 20)
    assert len(yearly) == 20 and yearly[-1] == ms("2046-01-01T00:00:00+00:00")
    leap = slots_between({"cron": "0 0 29 2 *", "timezone": "UTC"}, "j", after, None, 20)
    assert len(leap) == 20 and leap[-1] == ms("2108-02-29T00:00:00+00:00")  # 2100 is not a leap year


def test_a_schedule_whose_every_slot_falls_in_a_skipped_gap_has_none():
    """The second Sunday of March at 02:30 is always in New York's spring-forward gap (since
    2007): ``skip`` drops every one, and the search stops at the engine's horizon instead of
    walking to the year 9999; ``shift`` runs them at 03:30."""
    after = ms("2026-01-01T00:00:00+00:00")
    sched = {"cron": "30 2 * 3 0#2", "timezone": "America/New_York", "dst_gap": "skip"}
    assert next_after(sched, "j", after) is None
    shifted = next_after({**sched, "dst_gap": "shift"}, "j", after)
    assert shifted == ms("2026-03-08T03:30:00-04:00")


def test_by_month_rules_are_read_in_the_job_time_zone():
    s = {"cron": "0 9 L * *", "timezone": "Asia/Tokyo"}
    assert next_after(s, "j", ms("2026-01-31T00:00:00+00:00")) == ms("2026-02-28T00:00:00+00:00")
