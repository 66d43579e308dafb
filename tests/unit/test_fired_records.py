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
