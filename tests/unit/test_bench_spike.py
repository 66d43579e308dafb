from bench import spike
from streams.schedule import now_ms


def test_the_spike_is_planned_on_a_minute_boundary_after_the_jobs_can_be_indexed():
    before = now_ms()
    planned = spike.plan_spike(40_000)
    assert planned % 60_000 == 0
    needed = (40_000 / spike.SPIKE_INDEX_RATE + spike.SPIKE_MARGIN_S) * 1000
    assert before + needed <= planned < now_ms() + needed + 60_000


def test_cores_are_over_the_time_that_passed_between_the_readings():
    from bench.spike import cores_between

    late_second = [(12.0, {"worker-1": 3.0}), (10.0, {"worker-1": 1.0})]  # out of order
    assert cores_between(late_second) == {"worker-1": 1.0}  # 2 CPU s over 2 s, not over 4
    assert cores_between(late_second[:1]) is None
