"""Quiet hours where the scheduler decides a slot (``streams.scheduling.deciding``): a text due
inside them is held (indexed again at the window's end, the same slot and fire id) or expired
by its misfire policy, the held one sent at the end as ``held_quiet_hours`` with the reason;
and a held slot survives a takeover, re-derived from the job and the fired-through mark
(``streams.scheduling.slots.index_job``). On fakes, the clock passed in."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from bench.spike import job
from streams.runtime.codec import codec
from streams.scheduling import quiet_hours, slots
from streams.scheduling.due_index import DueIndex
from streams.scheduling.schedule import fire_id
from streams.topology import FIRED, LEDGER
from tests.unit.fakes import Jobs, schedule_state

HOUR = 3_600_000
SMS = {"type": "sms", "sms_to": "+15551234567", "sms_body": "take your pill",
       "sms_quiet_start": "21:00", "sms_quiet_end": "08:00",
       "sms_quiet_timezone": "America/New_York"}


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


SLOT = ms("2026-06-10T22:00:00-04:00")  # 02:00 UTC: inside the New York night
MORNING = ms("2026-06-11T08:00:00-04:00")  # the window's end
NEXT = SLOT + 24 * HOUR


def sms_job(job_id: str, policy: str, max_lateness_s: int,
            target: dict[str, Any] | None = None) -> dict[str, Any]:
    """A daily text at 02:00 UTC (22:00 in New York in June)."""
    return codec().decode(job(job_id, "0 0 2 * * *", SLOT - HOUR, misfire_policy=policy,
                              max_lateness_s=max_lateness_s, target=target or SMS))


class Clock:
    def __init__(self, at: int) -> None:
        self.at = at

    def __call__(self) -> int:
        return self.at


def state_with(*jobs: dict[str, Any], at: int):
    clock = Clock(at)
    state = schedule_state(Jobs({j["job_id"]: codec().encode("Job", j) for j in jobs}),
                           clock=clock)
    state.partitions.indexes = {0: DueIndex()}
    state.partitions.fired_through = {0: SLOT - HOUR}
    for j in jobs:
        slots.index_job(state.partitions.indexes[0], j, None)
    return state, clock


def records(state) -> list[tuple[str, dict[str, Any]]]:
    recorder = state._emitter
    return [(topic, codec().decode(value))
            for topic, value in zip(recorder.topics, recorder.values, strict=True)]


def test_a_text_due_in_quiet_hours_is_held_to_their_end_then_sent_as_held():
    text = sms_job("pill", "fire_once", 12 * 3600)
    state, clock = state_with(text, at=SLOT - 5_000)
    index = state.partitions.indexes[0]
    # prepared ahead, as in a spike: not the spike lane's to fire (it decides nothing)
    assert state.prepare_upcoming(SLOT - 5_000, float("inf")) == 1
    clock.at = SLOT + 20
    state.fire_due()
    assert records(state) == []  # nothing sent, nothing decided yet
    assert index.next_slot("pill") == SLOT and index.peek() == MORNING  # the same slot, held
    assert state.partitions.fired_through[0] > SLOT  # the mark passes it (see the takeover test)

    clock.at = MORNING - 1
    state.fire_due()
    assert records(state) == []  # never inside them

    clock.at = MORNING + 30
    state.fire_due()
    ((topic, fired),) = records(state)
    assert topic == FIRED.name
    assert fired["fire_id"] == fire_id("pill", SLOT) and fired["nominal_ms"] == SLOT
    assert fired["decision"] == quiet_hours.HELD and fired["fired_ms"] == MORNING + 30
    assert index.next_slot("pill") == NEXT  # one slot, one decision: the next one indexed
    assert fire_id("pill", SLOT) in state.reconciler.pending


def test_a_text_without_quiet_hours_fires_on_time_in_the_night():
    plain = dict(SMS, sms_quiet_start=None, sms_quiet_end=None, sms_quiet_timezone=None)
    state, _ = state_with(sms_job("plain", "fire_once", 12 * 3600, plain), at=SLOT + 20)
    state.fire_due()
    ((topic, fired),) = records(state)
    assert topic == FIRED.name and fired["decision"] == "fired"


def test_skip_expires_a_text_due_in_quiet_hours_at_once_with_their_reason():
    state, _ = state_with(sms_job("skip", "skip", 12 * 3600), at=SLOT + 20)
    state.fire_due()
    ((topic, entry),) = records(state)
    assert topic == LEDGER.name and entry["fire_id"] == fire_id("skip", SLOT)
    assert entry["decision"] == "expired_stale" and entry["outcome"] == "not_run"
    assert entry["reason"] == "quiet_hours: due inside them, misfire policy skip"
    assert state.partitions.indexes[0].next_slot("skip") == NEXT


def test_a_window_ending_past_the_slots_deadline_expires_it_at_once():
    state, _ = state_with(sms_job("short", "fire_all", 3600), at=SLOT + 20)
    state.fire_due()
    ((topic, entry),) = records(state)
    assert topic == LEDGER.name and entry["decision"] == "expired_stale"
    assert entry["reason"].startswith("quiet_hours: they end at 2026-06-11T08:00-04:00")
    assert state.partitions.indexes[0].next_slot("short") == NEXT


def test_a_paused_text_is_skipped_paused_not_held():
    paused = sms_job("paused", "fire_once", 12 * 3600)
    paused["paused"] = True
    state, _ = state_with(paused, at=SLOT + 20)
    state.fire_due()
    ((topic, entry),) = records(state)
    assert topic == LEDGER.name and entry["decision"] == "skipped_paused"


def test_a_held_slot_is_owed_again_by_a_scheduler_taking_the_partition_over():
    """The mark passed the held slot (it is indexed at the window's end); a new owner
    resuming from the mark indexes the job from the window's start, so the held slot comes
    back, and is decided by the same rules when reached."""
    held = sms_job("pill", "fire_once", 12 * 3600)
    mark = MORNING - 1  # the previous owner's mark, written while it held the slot
    index = DueIndex()
    slots.index_job(index, held, mark)
    assert index.next_slot("pill") == SLOT

    # a job whose text quiet hours would have expired, or one without them, resumes from the mark
    for other in (sms_job("skip", "skip", 12 * 3600), sms_job("short", "fire_all", 3600),
                  codec().decode(job("hook", "0 0 2 * * *", SLOT - HOUR, max_lateness_s=43200))):
        slots.index_job(index, other, mark)
        assert index.next_slot(other["job_id"]) == NEXT, other["job_id"]
    # a mark outside quiet hours holds nothing back
    slots.index_job(index, held, MORNING + HOUR)
    assert index.next_slot("pill") == NEXT

    # reached by the new owner after the window: sent as held
    state, _ = state_with(held, at=MORNING + 5 * 60_000)
    state.partitions.fired_through = {0: mark}
    slots.index_job(state.partitions.indexes[0], held, mark)
    state.fire_due()
    ((topic, fired),) = records(state)
    assert topic == FIRED.name and fired["decision"] == quiet_hours.HELD
    assert fired["fire_id"] == fire_id("pill", SLOT)


def test_a_held_text_stays_owed_when_its_job_is_updated_while_it_waits():
    """A job updated in the night (its body edited) while its 22:00 text is held: the held
    slot is still owed (``Partitions.track``, live), and goes at the window's end with the new
    revision; without ``owed`` it would get no decision at all. A schedule that no longer has
    that slot owes it nothing."""
    text = sms_job("pill", "fire_once", 12 * 3600)
    state, clock = state_with(text, at=SLOT + 20)
    state.fire_due()
    index = state.partitions.indexes[0]
    assert index.next_slot("pill") == SLOT and index.peek() == MORNING  # held

    clock.at = SLOT + HOUR
    edited = {**text, "revision": 2, "updated_ms": SLOT + HOUR,
              "target": {**text["target"], "sms_body": "take two pills"}}
    state.partitions.track(0, edited, live=True)
    assert index.next_slot("pill") == SLOT, "the held slot is still owed"
    state.jobs = Jobs({"pill": codec().encode("Job", edited)})
    state.fire_due()
    assert records(state) == [] and index.peek() == MORNING, "held again, not sent at night"
    clock.at = MORNING + 30
    state.fire_due()
    ((topic, fired),) = records(state)
    assert fired["fire_id"] == fire_id("pill", SLOT) and fired["decision"] == quiet_hours.HELD
    assert fired["target"]["sms_body"] == "take two pills"


def test_a_held_slot_the_updated_schedule_no_longer_has_is_not_owed():
    text = sms_job("pill", "fire_once", 12 * 3600)
    state, clock = state_with(text, at=SLOT + 20)
    state.fire_due()
    index = state.partitions.indexes[0]
    assert index.next_slot("pill") == SLOT  # held
    moved = {**text, "revision": 2, "updated_ms": SLOT + HOUR,
             "schedule": {**text["schedule"], "cron": "0 30 2 * * *"}}
    state.partitions.track(0, moved, live=True)
    assert index.next_slot("pill") == NEXT + 30 * 60_000, "02:00 is not a slot of 02:30's"


def test_held_since_is_the_windows_start_bounded_by_the_jobs_lateness():
    w = quiet_hours.parse("21:00", "08:00", "America/New_York")
    start = ms("2026-06-10T21:00:00-04:00")
    assert quiet_hours.held_since_ms(w, SLOT, 12 * HOUR) == start - quiet_hours.HELD_MARGIN_MS
    assert quiet_hours.held_since_ms(w, SLOT, 2 * HOUR) == MORNING - 2 * HOUR
    assert quiet_hours.held_since_ms(w, SLOT, 12 * HOUR, skip=True) is None
    assert quiet_hours.held_since_ms(w, MORNING, 12 * HOUR) is None
