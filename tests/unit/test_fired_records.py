"""The scheduler's fired records: each is the whole record ``Codec.encode`` would write, though
records decided in the same millisecond with the same decision share one encoding of their
varying fields (``ScheduleState.emit_fired``)."""

from bench.spike import job
from streams import scheduler
from streams.codec import codec
from streams.schedule import fire_id


class Recorder:
    """Stands in for the librdkafka producer: keeps what would have been produced."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def produce(self, topic, key, value, partition=None, **_) -> None:
        self.values.append(value)


def test_records_sharing_a_millisecond_share_its_encoding_and_each_decodes_whole():
    state = scheduler.ScheduleState()
    state._emitter = recorder = Recorder()
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
    ready = scheduler.prepare(j, slot, done)
    index.attach(j["job_id"], ready if prepared_ms is None else ready._replace(
        prepared_ms=prepared_ms))


def test_the_spike_lane_fires_only_what_preparation_settled_and_leaves_the_rest_to_fire():
    """In a spike, slots prepared ahead fire through ``_fire_on_time``; a paused job, a slot
    reached too late to fire, one already done or one prepared after its time must not: those
    go to ``_fire``, which decides them in full."""
    from streams.due_index import DueIndex
    from streams.misfire import MISFIRE_THRESHOLD_MS

    state = scheduler.ScheduleState()
    state._emitter = recorder = Recorder()
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
