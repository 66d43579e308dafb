"""The scheduler's fired records: each is the whole record ``Codec.encode`` would write, though
records decided in the same millisecond with the same decision share one encoding of their
varying fields (``ScheduleState.emit_fired``)."""

from bench.spike import job
from streams.runtime.clock import now_ms
from streams.runtime.codec import codec
from streams.scheduling import slots
from streams.scheduling.schedule import fire_id, jitter_ms, next_after
from streams.topology import FIRED, LEDGER
from tests.unit.fakes import Jobs, Runs, schedule_state


def test_records_sharing_a_millisecond_share_its_encoding_and_each_decodes_whole():
    state = schedule_state()
    recorder = state._emitter
    state.epoch = 7
    jobs = [codec().decode(job(f"job-{i}", "0 * * * * *", 1_000)) for i in range(3)]
    slot = 60_000
    emitted = [(jobs[0], "fired", 60_010), (jobs[1], "fired", 60_010),
               (jobs[2], "missed_caught_up", 60_010), (jobs[0], "fired", 60_011)]
    for j, decision, now in emitted:
        state.emit_fired(1, j, fire_id(j["job_id"], slot), slot, decision, now)
    decoded = [codec().decode(value) for value in recorder.values]
    assert [(d["job_id"], d["fired_ms"], d["decision"], d["epoch"]) for d in decoded] == [
        (j["job_id"], now, decision, 7) for j, decision, now in emitted]
    for value, record in zip(recorder.values, decoded, strict=True):
        assert value == codec().encode("Fired", record)


def prepared_slot(index, j, slot, *, done=False, prepared_ms=None):
    """Index ``j`` at ``slot`` with the preparation ``ScheduleState._prepare`` would attach."""
    index.set(j["job_id"], slot)
    index.attach(j["job_id"], slots.prepare(j, slot, done, prepared_ms))


def test_the_spike_lane_fires_only_what_preparation_settled_and_leaves_the_rest_to_fire():
    """In a spike, slots prepared ahead fire through ``_fire_on_time``; a paused job, a slot
    reached too late to fire, one already done or one prepared after its time must not: those
    go to ``_fire``, which decides them in full."""
    from streams.scheduling.due_index import DueIndex
    from streams.scheduling.misfire import MISFIRE_THRESHOLD_MS

    state = schedule_state()
    recorder = state._emitter
    state.epoch = 4
    slot = 1_800_000_000_000
    jobs = {name: codec().decode(job(name, "0 * * * * *", 1_000))
            for name in ("on-time", "paused", "done", "prepared-late")}
    jobs["paused"]["paused"] = True
    index = DueIndex()
    for name, j in jobs.items():
        prepared_slot(index, j, slot, done=name == "done",
                      prepared_ms=slot + 10 if name == "prepared-late" else None)
    rest = state._fire_on_time(3, index, index.pop_due(slot + 40, 100), now=slot + 40)

    assert sorted(job_id for job_id, _, _ in rest) == ["done", "paused", "prepared-late"]
    (value,) = recorder.values
    record = codec().decode(value)
    assert record["job_id"] == "on-time" and record["nominal_ms"] == slot
    assert record["decision"] == "fired" and record["epoch"] == 4
    assert value == codec().encode("Fired", record)  # the whole record, as encode writes it
    pending = state.reconciler.pending[fire_id("on-time", slot)]
    assert (pending.partition, pending.nominal_ms, pending.redrives) == (3, slot, 0)
    assert index.next_slot("on-time") == slot + 60_000  # its following slot is scheduled
    state.count()
    assert state.decided == 1

    # the same slot reached past the misfire threshold is not the lane's to fire
    late = DueIndex()
    prepared_slot(late, jobs["on-time"], slot + 60_000)
    beyond = slot + 60_000 + MISFIRE_THRESHOLD_MS + 1
    assert [job_id for job_id, _, _ in state._fire_on_time(3, late, late.pop_due(beyond, 10),
                                                           now=beyond)] == ["on-time"]


def test_a_round_fires_each_prepared_slot_once_at_its_moment_and_schedules_its_jittered_next():
    """``fire_due`` end to end over the lane and ``_fire``: every due slot decided exactly once
    (the lane's and the rest's), the fired record stamped with the moment it fired, the
    reconciler expecting it from then, and the following slot due with its own jitter."""
    from streams.scheduling.due_index import DueIndex

    state = schedule_state()
    recorder = state._emitter
    state.epoch = 2
    yearly = "0 0 0 1 1 *"  # the following slot is months away: nothing else gets prepared
    jittered, plain, paused = (codec().decode(job(name, yearly, 1_000))
                               for name in ("jittered", "plain", "paused"))
    jittered["jitter_s"], paused["paused"] = 30, True
    state.partitions.indexes = {0: DueIndex(), 1: DueIndex()}
    slot = now_ms() - 50  # reached 50 ms late: on time
    ahead = slot - 1_000  # prepared before the slot, as in a spike
    prepared_slot(state.partitions.indexes[0], jittered, slot, prepared_ms=ahead)
    prepared_slot(state.partitions.indexes[1], plain, slot, prepared_ms=ahead)
    prepared_slot(state.partitions.indexes[1], paused, slot, prepared_ms=ahead)

    before = now_ms()
    assert state.fire_due() is False  # nothing left that is due
    after = now_ms()

    fired = [codec().decode(value) for value, topic in zip(recorder.values, recorder.topics,
                                                            strict=True) if topic == FIRED.name]
    assert sorted(record["job_id"] for record in fired) == ["jittered", "plain"]  # once each
    assert recorder.topics.count(LEDGER.name) == 1  # the paused job's skip, decided by _fire
    assert state.decided == 3
    # the punctuator waits for the earliest slot left when it falls before its next tick
    assert state.next_due_ms == min(index.peek() for index in state.partitions.indexes.values()) > after
    for record in fired:
        assert record["decision"] == "fired" and record["epoch"] == 2
        assert before <= record["fired_ms"] <= after
        assert state.reconciler.pending[record["fire_id"]].emitted_ms == record["fired_ms"]
    following = next_after(jittered["schedule"], "jittered", slot)
    assert state.partitions.indexes[0].next_slot("jittered") == following
    assert state.partitions.indexes[0].peek() == following + jitter_ms(fire_id("jittered", following), 30)
    assert jitter_ms(fire_id("jittered", following), 30) > 0  # the check above means something


def test_the_reconciler_does_not_redrive_a_slot_the_done_table_has():
    """The ledger's observer can trail a busy worker by a minute; a slot already run is resolved,
    not re-driven (the run queued again) or expired (a second, false decision)."""
    from streams.scheduling.due_index import DueIndex

    jobs = [codec().decode(job(f"job-{i}", "0 * * * * *", 1_000)) for i in range(2)]
    slot = now_ms() - 1_000
    done = fire_id("job-0", slot)
    state = schedule_state(Jobs({f"job-{i}": job(f"job-{i}", "0 * * * * *", 1_000) for i in range(2)}),
                           Runs({done: b"succeeded"}))
    recorder = state._emitter
    state.partitions.indexes[1] = DueIndex()
    state.reconciler.lag_ms = 0
    for j in jobs:
        state.emit_fired(1, j, fire_id(j["job_id"], slot), slot, "fired", slot + 10)
    recorder.values.clear()
    state.reconcile(set())
    assert done not in state.reconciler.pending
    redriven = [codec().decode(value) for value in recorder.values]
    assert [(r["fire_id"], r["redrives"]) for r in redriven] == [(fire_id("job-1", slot), 1)]


def test_an_emails_intent_mark_is_no_recorded_outcome():
    """A caught email slot with only its intent mark goes on to the executor, which records it
    as ``unknown``; resolving it here would leave it without any decision."""
    from streams.topology import INTENT

    state = schedule_state(runs=Runs({"a@1": b"succeeded", "b@1": INTENT}))
    recorded = state.outcome_recorded
    assert recorded(1, "a@1") and not recorded(1, "b@1") and not recorded(1, "c@1")


def test_a_slot_is_due_to_run_by_its_lateness_bound_and_an_asked_for_one_from_the_asking():
    """``run_by_ms``: past it the executor expires the slot instead of running it. A backfill of
    yesterday's slots or a trigger is run however old the slot, within the bound from now."""
    state = schedule_state()
    j = codec().decode(job("job-r", "0 * * * * *", 1_000, max_lateness_s=60))
    day_ago, now = 60_000, 86_460_000
    for decision in ("fired", "backfilled", "triggered"):
        state.emit_fired(1, j, fire_id(j["job_id"], day_ago), day_ago, decision, now)
    run_by = [codec().decode(value)["run_by_ms"] for value in state._emitter.values]
    assert run_by == [day_ago + 60_000, now + 60_000, now + 60_000]
