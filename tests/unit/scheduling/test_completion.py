"""A job's derived state (``slots.job_state``: pure, the schedule and the clock) and the deleting
of a completed job that asked for it (``ScheduleState``: a tombstone on the jobs topic once its
last slot's decision is on the ledger)."""

from __future__ import annotations

from typing import Any

from bench.spike import job
from streams.runtime.codec import codec
from streams.scheduling import slots
from streams.scheduling.due_index import DueIndex
from streams.scheduling.partitions import Partitions
from streams.scheduling.schedule import fire_id, jitter_ms
from streams.topology import FIRED, JOBS, LEDGER
from tests.unit.fakes import Jobs, Runs, schedule_state

T = 1_800_000_000_000  # a minute boundary
MIN = 60_000


def one_off(job_id: str = "once", at: int = T, written: int = T - MIN, **changes: Any
            ) -> dict[str, Any]:
    record = codec().decode(job(job_id, "* * * * *", written))
    record["schedule"] = {**record["schedule"], "cron": None, "at_ms": at}
    record.update(changes)
    return record


def every_minute(end: int | None = None, **changes: Any) -> dict[str, Any]:
    record = codec().decode(job("ending", "0 * * * * *", T - MIN, end_ms=end))
    record.update(changes)
    return record


def test_a_one_off_completes_when_its_slot_falls_due():
    once = one_off()
    assert slots.job_state(once, T - 1) == "active"
    assert slots.job_state(once, T) == "active"  # due now: its decision is still to come
    assert slots.job_state(once, T + 1) == "completed"


def test_a_one_off_written_after_its_time_is_owed_from_when_it_was_written():
    late = one_off(at=T, written=T + 5_000)
    assert slots.job_state(late, T + 5_000) == "active"
    assert slots.job_state(late, T + 5_001) == "completed"


def test_a_one_off_text_held_by_its_quiet_hours_completes_when_they_end():
    quiet = {"type": "sms", "sms_to": "+15551234567", "sms_body": "b", "sms_quiet_start": "00:00",
             "sms_quiet_end": "01:00", "sms_quiet_timezone": "UTC"}
    midnight = T - T % (24 * 3_600_000)
    once = one_off(at=midnight + 10 * MIN, written=midnight - MIN, max_lateness_s=7_200,
                   misfire_policy="fire_once")
    once["target"] = {**once["target"], **quiet}
    assert slots.job_state(once, midnight + 20 * MIN) == "active", "held until 01:00"
    assert slots.job_state(once, midnight + 60 * MIN) == "active"
    assert slots.job_state(once, midnight + 60 * MIN + 1) == "completed"
    assert slots.job_state({**once, "misfire_policy": "skip"}, midnight + 20 * MIN) == \
        "completed", "skip expires it at its time: nothing is left to come"
    assert slots.job_state({**once, "max_lateness_s": 600}, midnight + 20 * MIN) == \
        "completed", "the window outlasts its deadline: expired at its time"


def test_jitter_delays_completion_to_the_last_slots_due_time():
    once = one_off(jitter_s=30)
    delay = jitter_ms(fire_id("once", T), 30)
    assert delay > 0
    assert slots.job_state(once, T + delay) == "active"
    assert slots.job_state(once, T + delay + 1) == "completed"


def test_a_schedule_with_an_end_completes_after_its_last_slot():
    ending = every_minute(end=T + 90_000)  # last slot T + 1 min
    assert slots.job_state(ending, T + MIN) == "active"
    assert slots.job_state(ending, T + MIN + 1) == "completed"
    assert slots.job_state(every_minute(), T + 10 * 365 * 86_400_000) == "active"
    jittered = every_minute(end=T + 90_000, jitter_s=50)
    last_due = T + MIN + jitter_ms(fire_id("ending", T + MIN), 50)
    assert slots.job_state(jittered, last_due) == "active"
    assert slots.job_state(jittered, last_due + 1) == "completed"


def test_paused_until_completed_and_a_paused_job_completes_too():
    assert slots.job_state(one_off(paused=True), T - 1) == "paused"
    assert slots.job_state(one_off(paused=True), T + 1) == "completed"
    assert slots.job_state(every_minute(paused=True), T) == "paused"


def test_records_of_the_previous_job_schema_read_with_the_new_fields_defaults():
    from tests.unit.runtime.test_codec import encode_with_history

    old = {k: v for k, v in one_off().items()
           if k not in ("name", "description", "labels", "delete_after_completion")}
    data = encode_with_history("job.1.avsc", old)
    assert data[2:10] != codec().fingerprint("Job")
    record = codec().decode(data)
    assert (record["name"], record["description"], record["labels"],
            record["delete_after_completion"]) == (None, None, {}, False)
    assert slots.job_state(record, T + 1) == "completed"


# -- delete_after_completion in the scheduler ----------------------------------------------------

def state_with(*jobs: dict[str, Any], marks: dict[str, bytes] | None = None):
    table = Jobs({j["job_id"]: codec().encode("Job", j) for j in jobs})
    state = schedule_state(table, Runs(marks), clock=lambda: T + 10)
    index = DueIndex()
    state.partitions.indexes = {0: index}
    for j in jobs:
        slots.index_job(index, j, None)
    return state, table, state._emitter


def tombstones(recorder) -> list[str]:
    return [key for topic, key, value in zip(recorder.topics, recorder.keys, recorder.values,
                                             strict=True) if topic == JOBS.name and value is None]


def test_a_completed_job_is_deleted_once_its_last_slot_is_on_the_ledger():
    doomed, kept = one_off("doomed", delete_after_completion=True), one_off("kept")
    state, _, recorder = state_with(doomed, kept)
    state.fire_due()
    assert recorder.topics.count(FIRED.name) == 2
    assert tombstones(recorder) == []  # fired, not yet decided: the reconciler may need the job
    state.decision_recorded(fire_id("kept", T))
    state.decision_recorded(fire_id("doomed", T))
    assert tombstones(recorder) == ["doomed"]
    state.decision_recorded(fire_id("doomed", T))  # the same decision read again
    assert tombstones(recorder) == ["doomed"]


def test_a_skipped_last_slot_deletes_it_too():
    """A paused one-off: its slot is recorded skipped_paused by the scheduler itself, whose
    ledger record is produced before the tombstone: no decision is coming from elsewhere."""
    state, _, recorder = state_with(one_off("paused", paused=True, delete_after_completion=True))
    state.fire_due()
    assert recorder.topics == [LEDGER.name, JOBS.name]
    assert tombstones(recorder) == ["paused"]


def test_the_executors_outcome_resolves_the_pending_slot_and_deletes_the_job():
    """``slot_decided``, called in-process by the executor once its ledger record is
    acknowledged: the reconciler stops waiting for the slot, and the completed job goes."""
    state, _, recorder = state_with(one_off("doomed", delete_after_completion=True))
    state.fire_due()
    fid = fire_id("doomed", T)
    assert fid in state.reconciler.pending and tombstones(recorder) == []
    state.slot_decided(fid)
    assert fid not in state.reconciler.pending
    assert tombstones(recorder) == ["doomed"]


def test_a_recurring_job_is_deleted_after_its_last_slot_only():
    ending = every_minute(end=T + 90_000, delete_after_completion=True)
    ending["updated_ms"] = T - 1
    state, _, recorder = state_with(ending)
    state.fire_due()  # the slot at T: one more is left
    state.decision_recorded(fire_id("ending", T))
    assert tombstones(recorder) == [] and "ending" in state.partitions.indexes[0]
    state.clock = lambda: T + MIN + 10
    state.fire_due()
    state.decision_recorded(fire_id("ending", T + MIN))
    assert tombstones(recorder) == ["ending"]


def test_a_job_changed_since_its_last_slot_is_not_deleted():
    doomed = one_off("doomed", delete_after_completion=True)
    state, table, recorder = state_with(doomed)
    state.fire_due()
    # updated before the decision arrives: a slot is owed again (indexed), so it stays
    later = {**doomed, "schedule": {**doomed["schedule"], "at_ms": T + MIN}, "revision": 2}
    table.jobs["doomed"] = codec().encode("Job", later)
    slots.index_job(state.partitions.indexes[0], later, None)
    state.decision_recorded(fire_id("doomed", T))
    assert tombstones(recorder) == []


def test_a_last_slot_already_recorded_deletes_it_at_once():
    """Decided before a takeover (the done table has its outcome): no decision is coming."""
    doomed = one_off("doomed", delete_after_completion=True)
    state, _, recorder = state_with(doomed, marks={fire_id("doomed", T): b"succeeded"})
    state.fire_due()
    assert FIRED.name not in recorder.topics
    assert tombstones(recorder) == ["doomed"]


def test_a_takeover_deletes_the_completed_jobs_it_finds():
    """The worker that decided the last slot died before the decision came back: the next owner
    finds the job with no slot owed past its fired-through mark."""
    doomed = one_off("doomed", delete_after_completion=True)
    kept = one_off("kept")
    table = Jobs({j["job_id"]: codec().encode("Job", j) for j in (doomed, kept)})
    parts = Partitions(table, load_marks=lambda _: {0: T + 5}, read_fired=lambda _b, _m: {})
    parts.adopt({0}, set(), epoch=3)
    assert parts.take_completed() == [(0, "doomed")]
    assert parts.take_completed() == []

    state = schedule_state(table, Runs())
    state.partitions = Partitions(table, load_marks=lambda _: {0: T + 5},
                                  read_fired=lambda _b, _m: {})
    state.rebuild({0}, set())
    assert tombstones(state._emitter) == ["doomed"]


def test_a_revoked_partition_forgets_its_jobs_to_delete():
    state, _, recorder = state_with(one_off("doomed", delete_after_completion=True))
    state.fire_due()
    state.drop(0)
    state.decision_recorded(fire_id("doomed", T))
    assert tombstones(recorder) == [] and state.completing == {}
