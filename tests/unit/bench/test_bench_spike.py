import pytest

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


MINUTE = 1_800_000_060_000
MS = 1_000_000  # ns


def test_arrivals_are_accounted_per_slot_first_arrival_duplicates_and_missing():
    from bench.spike import account

    expected = {f"j{i}@m1": MINUTE for i in range(4)} | {f"j{i}@m2": MINUTE + 60_000 for i in range(4)}
    pairs = [("j0@m1", (MINUTE + 900) * MS), ("j1@m1", (MINUTE + 1_500) * MS),
             ("j0@m1", (MINUTE + 400) * MS),  # a duplicate that is earlier than the first seen
             ("j2@m1", (MINUTE + 2_000) * MS), ("j2@m1", (MINUTE + 2_100) * MS),
             ("j0@m2", (MINUTE + 60_300) * MS),
             ("stranger@m1", (MINUTE + 1) * MS)]
    received, others = account(pairs, expected)
    first, second = received[MINUTE], received[MINUTE + 60_000]
    assert (first.slots, first.received, first.missing, first.duplicates) == (4, 3, 1, 2)
    assert sorted(first.lags_ms) == [400, 1_500, 2_000]  # j0's lag is its earliest arrival's
    assert (first.first_ns, first.last_ns) == ((MINUTE + 400) * MS, (MINUTE + 2_000) * MS)
    assert (second.received, second.missing, second.duplicates, second.lags_ms) == (1, 3, 0, [300])
    assert others == 1


def test_a_spike_nothing_arrived_from_is_all_missing():
    from bench.spike import account, webhook_figures

    received, others = account([], {"j0@m1": MINUTE, "j1@m1": MINUTE})
    got = received[MINUTE]
    assert (got.received, got.missing, others) == (0, 2, 0)
    figures = webhook_figures(got, [], {"failed": 2}, 2, MINUTE, [], 0, {})
    assert figures["missing (never received)"] == 2
    assert figures["runs/s (first to last arrival)"] == 0
    assert figures["run lag max ms"] is None
    assert figures["slots without a ledger outcome"] == 0


def test_webhook_figures_put_what_users_see_first():
    from bench.spike import Received, webhook_figures

    got = Received(slots=3, lags_ms=[1_000, 2_000, 3_000], duplicates=1,
                   first_ns=(MINUTE + 1_000) * MS, last_ns=(MINUTE + 3_000) * MS)
    used = [(MINUTE / 1000 - 1, {"worker-1": 10.0, "receiver": 1.0}),
            (MINUTE / 1000 + 4, {"worker-1": 12.5, "receiver": 1.03})]
    figures = webhook_figures(got, [MINUTE + 100, MINUTE + 200], {"succeeded": 2}, 2, MINUTE,
                              used, 3, {"worker-1": 1, "receiver": 2})
    keys = list(figures)
    assert keys.index("run lag p99 ms") < keys.index("fire lag p99 ms")
    assert figures["runs/s (first to last arrival)"] == 2  # 3 slots over 2 s: 1.5, rounded
    assert figures["run lag p50 ms (arrival - nominal)"] == 2_000
    assert figures["run lag max ms"] == 3_000
    assert figures["duplicates received"] == 1
    assert figures["missing (never received)"] == 0
    assert figures["slots without a ledger outcome"] == 1
    assert figures["fire lag max ms"] == 200
    assert figures["cores used from 1 s before to its last arrival"] == {
        "worker-1": 0.5, "receiver": 0.01}
    assert figures["CPU ms per run (window's CPU / arrivals in it)"] == {
        "worker-1": 833.333, "receiver": 10.0, "whole box": 843.333,
        "cronstream (no receiver, no benchmark)": 833.333}


def test_the_cpu_window_is_the_narrowest_sampled_one_around_the_drain():
    from bench.spike import runs_between, window

    readings = [(float(t), {"w": float(t)}) for t in (8, 9, 10, 11, 12, 13)]
    assert [at for at, _ in window(readings, 9.5, 11.2)] == [9.0, 12.0]
    assert [at for at, _ in window(readings, 9.0, 12.0)] == [9.0, 12.0]
    assert [at for at, _ in window(readings, 9.0, 99.0)] == [9.0, 13.0]  # sampling stopped early
    assert window(readings, 7.0, 10.0) == []  # nothing sampled before the window
    assert runs_between([8.5, 9.0, 10.0, 12.0, 12.5], window(readings, 9.5, 11.2)) == 3
    assert runs_between([10.0], []) == 0


def test_the_sampler_reads_until_stopped_and_once_more_at_the_stop():
    import threading
    import time

    from bench.spike import CpuSampler

    read = threading.Event()

    def fake(roots):
        read.set()
        return {"w": 1.0}

    sampler = CpuSampler({"w": 1}, start_s=time.time() - 1, read=fake)
    assert read.wait(10)
    sampler.stop()
    assert len(sampler.readings) >= 2
    assert all(reading[1] == {"w": 1.0} for reading in sampler.readings)


def test_arrivals_are_waited_for_until_all_came_or_they_stopped_coming():
    from bench.spike import QUIET_S, wait_arrivals

    clock = {"ms": MINUTE}

    def sleep(seconds):
        clock["ms"] += int(seconds * 1000)

    def now():
        return clock["ms"]

    # all of them arrive at the 5th poll
    counts = iter([(0, 0), (10, (MINUTE + 1_000) * MS), (20, (MINUTE + 2_000) * MS),
                   (30, (MINUTE + 3_000) * MS), (40, (MINUTE + 4_000) * MS)])
    assert wait_arrivals(lambda: next(counts), 40, MINUTE, MINUTE + 600_000, now, sleep) == 40

    # 30 of 40 arrive, then nothing: waited QUIET_S after the last one
    clock["ms"] = MINUTE
    last = (MINUTE + 2_000) * MS
    assert wait_arrivals(lambda: (30, last), 40, MINUTE, MINUTE + 600_000, now, sleep) == 30
    assert MINUTE + 2_000 + QUIET_S * 1000 < clock["ms"] <= MINUTE + 2_000 + QUIET_S * 1000 + 1_000

    # nothing at all: QUIET_S after the last spike
    clock["ms"] = MINUTE
    assert wait_arrivals(lambda: (0, 0), 40, MINUTE, MINUTE + 600_000, now, sleep) == 0
    assert clock["ms"] <= MINUTE + QUIET_S * 1000 + 1_000

    # still arriving at the deadline: the deadline
    clock["ms"] = MINUTE
    assert wait_arrivals(lambda: (1, clock["ms"] * MS), 40, MINUTE, MINUTE + 5_000, now, sleep) == 1
    assert clock["ms"] <= MINUTE + 6_000


def test_webhook_jobs_call_the_receiver_and_end_after_the_last_measured_minute():
    from bench.spike import job, webhook_target
    from streams.runtime.codec import codec

    record = codec().decode(job("spike-x-0000001", "0 * * * * *", MINUTE - 60_000,
                                start_ms=MINUTE, target=webhook_target("http://127.0.0.1:9/hook"),
                                end_ms=MINUTE + 60_000))
    assert record["target"]["type"] == "webhook"
    assert record["target"]["url"] == "http://127.0.0.1:9/hook"
    assert record["schedule"]["end_ms"] == MINUTE + 60_000
    kafka = codec().decode(job("spike-x-0000001", "0 * * * * *", MINUTE))
    assert kafka["target"]["type"] == "kafka" and kafka["schedule"]["end_ms"] is None


def test_the_victims_job_is_another_tenants_and_fires_every_second():
    from bench.spike import VICTIM_CRON, VICTIM_TENANT, job, webhook_target
    from streams.runtime.codec import codec
    from streams.scheduling.cron import parse

    record = codec().decode(job("victim-x-0000000", VICTIM_CRON, MINUTE, start_ms=MINUTE - 5_000,
                                target=webhook_target("http://127.0.0.1:9/victim"),
                                tenant=VICTIM_TENANT))
    assert record["tenant"] == VICTIM_TENANT != spike.TENANT
    assert record["target"]["url"] == "http://127.0.0.1:9/victim"
    assert parse(VICTIM_CRON).seconds == tuple(range(60))
    slow = codec().decode(job("s", "0 * * * * *", MINUTE, target=webhook_target("u", 10.0)))
    assert slow["target"]["timeout_s"] == 10.0


def test_the_slow_share_and_durations_are_checked_on_the_command_line():
    import argparse

    from bench.spike import seconds_at_least, share_of_jobs

    assert share_of_jobs("0.1") == 0.1 and share_of_jobs("0") == 0.0
    for bad in ("1", "-0.1", "half", "nan"):
        with pytest.raises(argparse.ArgumentTypeError):
            share_of_jobs(bad)
    assert seconds_at_least(0.0)("5") == 5.0
    for bad in ("-1", "nan", "soon"):
        with pytest.raises(argparse.ArgumentTypeError):
            seconds_at_least(0.0)(bad)


def test_the_victims_arrivals_are_set_apart_from_the_spikes():
    from bench.spike import apart

    pairs = [("spike-a@m", 1), ("victim-a-0000000@s1", 2), ("spike-b@m", 3),
             ("victim-a-00000001@s1", 4)]  # another job whose id starts like the victim's
    assert apart(pairs, "victim-a-0000000") == (
        [("spike-a@m", 1), ("spike-b@m", 3), ("victim-a-00000001@s1", 4)],
        [("victim-a-0000000@s1", 2)])
    assert apart(pairs, None) == (pairs, [])


def test_a_spikes_isolation_figures_per_group_and_for_the_victim():
    from bench import isolation
    from bench.spike import account, isolation_figures
    from streams.scheduling.schedule import fire_id

    fast, slow = ["f0", "f1", "f2"], ["s0"]
    pairs = [(fire_id("f0", MINUTE), (MINUTE + 100) * MS), (fire_id("f1", MINUTE), (MINUTE + 300) * MS),
             (fire_id("s0", MINUTE), (MINUTE + 2_500) * MS),
             (fire_id("s0", MINUTE), (MINUTE + 9_000) * MS)]  # a slow one again
    groups = {group: (ids, account(pairs, {fire_id(j, MINUTE): MINUTE for j in ids})[0])
              for group, ids in ((isolation.FAST, fast), (isolation.SLOW, slow))}
    got, _ = account(pairs, {fire_id(j, MINUTE): MINUTE for j in fast + slow})
    verdicts = {fire_id("f0", MINUTE): "succeeded", fire_id("f1", MINUTE): "succeeded",
                fire_id("f2", MINUTE): "expired_stale", fire_id("s0", MINUTE): "failed"}
    victim = [(fire_id("v", MINUTE + s * 1_000), (MINUTE + s * 1_000 + 400) * MS) for s in range(3)]
    figures = isolation_figures(MINUTE, got[MINUTE], groups, verdicts, ("v", victim))
    fast_figures = isolation.of_group(figures, isolation.FAST)
    slow_figures = isolation.of_group(figures, isolation.SLOW)
    victim_figures = isolation.of_group(figures, isolation.VICTIM)
    assert fast_figures is not None and slow_figures is not None and victim_figures is not None
    assert (fast_figures["slots"], fast_figures["missing"], fast_figures["run lag max ms"]) == (3, 1, 300)
    assert fast_figures["ledger outcomes"] == {"succeeded": 2, "failed": 0, "expired_stale": 1}
    assert (slow_figures["duplicates"], slow_figures["run lag p50 ms"]) == (1, 2_500)
    assert slow_figures["ledger outcomes"] == {"succeeded": 0, "failed": 1, "expired_stale": 0}
    # the victim's slots: from the spike's second to its last first arrival (2.5 s): 0, 1, 2 s
    assert (victim_figures["slots"], victim_figures["missing"]) == (3, 0)
    assert victim_figures["run lag p99 ms"] == 400 and victim_figures["run lag p99 target met"]

    nothing, _ = account([], {fire_id("f0", MINUTE): MINUTE})
    assert isolation_figures(MINUTE, nothing[MINUTE], {}, {}, None) == {}
    alone = isolation_figures(MINUTE, nothing[MINUTE], {}, {}, ("v", []))
    assert alone["victim: slots"] == 1 and alone["victim: missing"] == 1  # its spike's second


def test_the_isolation_block_is_printed_only_when_the_run_had_a_victim_or_slow_jobs(capsys):
    from bench.spike import print_isolation

    print_isolation({"first spike": {"slots due": 3}}, 1)
    assert capsys.readouterr().out == ""
    print_isolation({"victim": "tenant bench-victim ...",
                     "first spike": {"victim: slots": 2, "victim: missing": 0,
                                     "victim: duplicates": 0, "victim: run lag p50 ms": 5,
                                     "victim: run lag p99 ms": 9, "victim: run lag max ms": 9,
                                     "victim: run lag p99 target ms": 2_000,
                                     "victim: run lag p99 target met": True}}, 1)
    printed = capsys.readouterr().out
    assert "victim: tenant bench-victim ..." in printed and "met" in printed
