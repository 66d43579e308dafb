"""Quiet hours (``streams.scheduling.quiet_hours``): windows across midnight, DST days in both
directions, and what a due text does under each misfire policy."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from streams.scheduling.quiet_hours import (
    REASON,
    Decision,
    Verdict,
    decide,
    ends_at_ms,
    first_instant,
    inside,
    parse,
)

NY = "America/New_York"


def ms(text: str) -> int:
    """An RFC 3339 instant with its offset, as ms."""
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def at(value_ms: int | None) -> str | None:
    return None if value_ms is None else datetime.fromtimestamp(value_ms / 1000, UTC).isoformat()


def test_a_window_across_midnight_holds_until_the_next_morning():
    w = parse("21:00", "08:00", NY)
    assert at(ends_at_ms(w, ms("2026-06-10T22:30:00-04:00"))) == "2026-06-11T12:00:00+00:00"
    assert at(ends_at_ms(w, ms("2026-06-11T03:00:00-04:00"))) == "2026-06-11T12:00:00+00:00"
    assert inside(w, ms("2026-06-10T21:00:00-04:00"))  # the start is inside
    assert not inside(w, ms("2026-06-11T08:00:00-04:00"))  # the end is not
    assert not inside(w, ms("2026-06-10T20:59:59-04:00"))
    assert not inside(w, ms("2026-06-10T12:00:00-04:00"))


def test_a_window_within_one_day():
    w = parse("12:00", "13:30", "Europe/Paris")
    assert at(ends_at_ms(w, ms("2026-01-05T12:10:00+01:00"))) == "2026-01-05T12:30:00+00:00"
    assert not inside(w, ms("2026-01-05T13:30:00+01:00"))
    assert not inside(w, ms("2026-01-05T23:00:00+01:00"))


def test_spring_forward_a_window_ending_in_the_gap_ends_when_the_clock_jumps():
    # 2026-03-08: New York goes from 01:59:59 EST to 03:00 EDT; 02:30 never happens
    w = parse("22:00", "02:30", NY)
    assert first_instant(datetime(2026, 3, 8).date(), w.end, w.zone).isoformat() == \
        "2026-03-08T07:00:00+00:00"
    assert at(ends_at_ms(w, ms("2026-03-08T01:45:00-05:00"))) == "2026-03-08T07:00:00+00:00"
    assert not inside(w, ms("2026-03-08T03:00:00-04:00"))


def test_spring_forward_shortens_the_night_by_an_hour():
    w = parse("21:00", "08:00", NY)
    start, end = ms("2026-03-07T21:00:00-05:00"), ends_at_ms(w, ms("2026-03-07T21:00:00-05:00"))
    assert end is not None and (end - start) == 10 * 3600 * 1000


def test_fall_back_a_repeated_end_is_its_first_occurrence_and_the_repeat_is_outside():
    # 2026-11-01: New York's 01:00-01:59 happens twice (EDT, then EST)
    w = parse("22:00", "01:30", NY)
    assert at(ends_at_ms(w, ms("2026-11-01T01:10:00-04:00"))) == "2026-11-01T05:30:00+00:00"
    assert not inside(w, ms("2026-11-01T01:10:00-05:00"))  # the second 01:10: already ended
    assert not inside(w, ms("2026-11-01T01:40:00-04:00"))


def test_fall_back_lengthens_the_night_by_an_hour():
    w = parse("21:00", "08:00", NY)
    start = ms("2026-10-31T21:00:00-04:00")
    end = ends_at_ms(w, start)
    assert end is not None and end - start == 12 * 3600 * 1000


@pytest.mark.parametrize(("start", "end", "zone", "problem"), [
    ("21:00", "21:00", NY, "different"), ("9:00", "08:00", NY, "HH:MM"),
    ("24:00", "08:00", NY, "HH:MM"), ("21:00", "08:60", NY, "HH:MM"),
    ("21:00", "08:00", "Mars/Olympus", "IANA"), ("21:00", "08:00", "", "IANA"),
])
def test_bad_windows_are_refused_naming_the_problem(start, end, zone, problem):
    with pytest.raises(ValueError, match=problem):
        parse(start, end, zone)


def test_decisions_under_each_misfire_policy():
    w = parse("21:00", "08:00", NY)
    due = ms("2026-06-10T22:00:00-04:00")
    morning = ms("2026-06-11T08:00:00-04:00")
    hours = 3600 * 1000
    assert decide(None, due, due + hours) == Decision(Verdict.SEND)
    assert decide(w, ms("2026-06-10T12:00:00-04:00"), None, skip=True) == Decision(Verdict.SEND)
    held = decide(w, due, due + 12 * hours)  # fire_once or fire_all, max_lateness_s 12 h
    assert held == Decision(Verdict.HOLD, until_ms=morning,
                            reason=f"{REASON}: held until 2026-06-11T08:00-04:00")
    assert decide(w, due, None).verdict is Verdict.HOLD  # no deadline
    # the deadline is the window's end: sent a moment after it, the slot would be late anyway
    assert decide(w, due, morning).verdict is Verdict.EXPIRE
    assert decide(w, due, morning + 1).verdict is Verdict.HOLD
    too_late = decide(w, due, due + hours)
    assert too_late.verdict is Verdict.EXPIRE and "max_lateness_s" in str(too_late.reason)
    assert too_late.until_ms is None
    skipped = decide(w, due, due + 12 * hours, skip=True)
    assert skipped.verdict is Verdict.EXPIRE and str(skipped.reason).startswith(REASON)


def test_a_targets_window_and_the_executors_checks():
    from streams.scheduling.quiet_hours import (
        held_run_reason,
        held_until_ms,
        last_end_ms,
        refused_at_run,
        window_of,
    )

    sms = {"type": "sms", "sms_quiet_start": "21:00", "sms_quiet_end": "08:00",
           "sms_quiet_timezone": NY}
    assert window_of(sms) == parse("21:00", "08:00", NY)
    assert window_of(dict(sms, type="webhook")) is None  # only texts have quiet hours
    assert window_of(dict(sms, sms_quiet_end=None)) is None
    assert window_of(dict(sms, sms_quiet_timezone="Mars/Olympus")) is None
    w = window_of(sms)
    assert w is not None
    due, morning = ms("2026-06-10T22:00:00-04:00"), ms("2026-06-11T08:00:00-04:00")
    assert last_end_ms(w, morning + 3_600_000) == morning
    assert last_end_ms(w, morning) == morning
    assert held_until_ms(w, due, morning + 5, due + 12 * 3_600_000) == morning
    assert held_until_ms(w, due, morning - 5, due + 12 * 3_600_000) is None  # not ended yet
    assert held_until_ms(w, due, morning + 5, due + 3_600_000) is None  # expired, not held
    assert held_until_ms(w, morning + 60_000, morning + 120_000, None) is None  # due outside
    assert refused_at_run(sms, due) == ("quiet_hours: its run came inside them (they end at "
                                        "2026-06-11T08:00-04:00); not sent")
    assert refused_at_run(sms, morning) is None
    assert refused_at_run(dict(sms, type="webhook"), due) is None
    assert held_run_reason(sms, morning + 40, None) == "quiet_hours: held until 2026-06-11T08:00-04:00"
    assert held_run_reason(sms, morning + 40, "HTTP 500").endswith("; HTTP 500")
