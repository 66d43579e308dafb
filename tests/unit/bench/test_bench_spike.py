from bench import spike
from streams.runtime.clock import now_ms


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


def test_each_spike_is_measured_against_its_own_minute():
    minute = 1_800_000_060_000
    figures = spike.spike_figures(
        fired_at=[minute + 100, minute + 300, minute + 500], ran_at=[minute + 2_000],
        outcomes={"succeeded": 1}, minute=minute, readings=[])
    assert figures["fires recorded"] == 3
    assert figures["fire lag p50 ms"] == 300
    assert figures["fire lag max ms"] == 500
    assert figures["fires/s (first to last fire)"] == 8  # 3 fires over 400 ms: 7.5, rounded
    assert figures["run lag p50 ms"] == 2_000
    assert figures[next(k for k in figures if k.startswith("cores used"))] is None
