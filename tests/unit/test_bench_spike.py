from bench import spike
from streams.schedule import now_ms


def test_the_spike_is_planned_on_a_minute_boundary_after_the_jobs_can_be_indexed():
    before = now_ms()
    planned = spike.plan_spike(40_000)
    assert planned % 60_000 == 0
    needed = (40_000 / spike.SPIKE_INDEX_RATE + spike.SPIKE_MARGIN_S) * 1000
    assert before + needed <= planned < now_ms() + needed + 60_000
