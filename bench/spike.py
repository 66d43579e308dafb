"""Top-of-minute spike: N jobs due in the same second, with M idle schedules loaded.

    .venv/bin/python -m bench.spike [--jobs 100000] [--idle 1000000] [--workers 2] [--minutes 2]

Runs on the real local stack (started if needed). Jobs are written straight to the jobs topic
(the API's validation is not what is measured): the idle ones as ``0 0 1 1 *``, then the spike
jobs as ``0 * * * * *`` (every minute at second 0) starting at a minute boundary far enough
ahead that the workers have indexed them all before it, so the first measured slot is the first
one of every spike job and no earlier spike is still running when it comes. The spikes of
``--minutes`` consecutive minutes are measured, each on its own: on a fresh stack the first is
the broker's first burst of this kind of traffic (its JVM compiles the code paths for it while
serving it: the JIT compiler threads' share of the cores is printed), the next one what a
stack that has run before does. Every fired record of those slots is read back from
``cronstream.fired`` (once the last spike is over: reading it while it happened took cores
from it) and its fire lag (the record's CreateTime, set when the scheduler produced it, minus
the nominal time) measured; every ledger record of them from ``cronstream.ledger`` gives the
run lag (the executor's record of the outcome, minus the nominal time): what a user of the
target sees. Afterwards all benchmark jobs are deleted (tombstones).
Target: 10k fires/s with p99 fire lag <= 1 s.
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid

from confluent_kafka import Consumer, TopicPartition

from bench.common import (
    component_pids,
    count_at_least,
    cpu_seconds,
    cpu_share,
    jit_cpu_seconds,
    percentile,
    report,
    rss_peak_mib,
    stack_with_workers,
    topic_ends,
    wait_consumed,
)
from stack import processes
from streams.runtime.clock import now_ms
from streams.runtime.codec import codec
from streams.runtime.emit import Emitter
from streams.scheduling.schedule import fire_id
from streams.topology import FIRED, JOBS, LEDGER

SPIKE_INDEX_RATE = 1_000  # spike jobs/s the workers are assumed to index at, to plan the spike
SPIKE_MARGIN_S = 30
RUNS_WAIT_S = 600  # how long after the spike the runs are waited for
CPU_WINDOW_S = (1.0, 3.0)  # where the box's cores went: from before the spike to after it
# nothing is read before this long after the spike: the figures come from the records' own
# timestamps, and decoding 100k fired records as they came took a quarter of a core from the
# system under test in the spike's own second
READ_AFTER_S = CPU_WINDOW_S[1] + 2


def job(job_id: str, cron: str, now: int, misfire_policy: str = "skip",
        max_lateness_s: int = 60, start_ms: int | None = None) -> bytes:
    """A benchmark job as the API would have written it, firing into a Kafka topic."""
    return codec().encode("Job", {
        "job_id": job_id, "tenant": "bench", "revision": 1,
        "schedule": {"cron": cron, "timezone": "UTC", "start_ms": start_ms},
        "target": {"type": "kafka", "topic": "bench.fires", "value": "tick"},
        "misfire_policy": misfire_policy, "max_lateness_s": max_lateness_s,
        "retry_max_attempts": 1, "created_ms": now, "updated_ms": now,
    })


def load(emitter: Emitter, prefix: str, count: int, cron: str, start_ms: int | None = None,
         misfire_policy: str = "skip", max_lateness_s: int = 60) -> list[str]:
    ids = [f"{prefix}-{i:07d}" for i in range(count)]
    now = now_ms()
    for job_id in ids:
        emitter.produce(JOBS, job_id, job(job_id, cron, now, misfire_policy, max_lateness_s,
                                          start_ms))
    emitter.flush(120)
    return ids


def plan_spike(jobs: int) -> int:
    """The first minute boundary the spike jobs can be indexed before (see SPIKE_INDEX_RATE)."""
    earliest = now_ms() + (jobs / SPIKE_INDEX_RATE + SPIKE_MARGIN_S) * 1000
    return int(-(-earliest // 60_000) * 60_000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=count_at_least(1), default=100_000)
    parser.add_argument("--idle", type=count_at_least(0), default=1_000_000)
    parser.add_argument("--workers", type=count_at_least(1), default=2)
    parser.add_argument("--minutes", type=count_at_least(1), default=2,
                        help="spikes measured, a minute apart (the jobs fire every minute): the "
                             "first is the stack's first burst of its kind, the next ones are "
                             "what a stack that has run before does")
    args = parser.parse_args()

    conf, stack, workers = stack_with_workers(args.workers)
    emitter = Emitter(conf.bootstrap, "bench-spike", **{"linger.ms": 50})
    run = uuid.uuid4().hex[:6]
    started = time.monotonic()
    idle = load(emitter, f"idle-{run}", args.idle, "0 0 1 1 *")
    wait_consumed(conf.bootstrap, JOBS, every_s=2)
    spike_ms = plan_spike(args.jobs)
    spike = load(emitter, f"spike-{run}", args.jobs, "0 * * * * *", start_ms=spike_ms)
    produced_s = time.monotonic() - started
    wait_consumed(conf.bootstrap, JOBS, every_s=2)
    loaded_s = time.monotonic() - started
    print(f"loaded {len(idle) + len(spike)} jobs: produced in {produced_s:.1f}s, indexed by the "
          f"workers in {loaded_s:.1f}s; the spike is at {spike_ms} "
          f"({(spike_ms - now_ms()) / 1000:.0f} s from now)", flush=True)
    if now_ms() > spike_ms - 2_000:
        stop(emitter, spike, idle)
        raise SystemExit(f"the workers indexed the spike jobs slower than {SPIKE_INDEX_RATE}/s "
                         "and the planned spike has passed; nothing measured (lower --jobs)")

    starts = [TopicPartition(topic, p, o) for topic in (FIRED.name, LEDGER.name)
              for p, o in topic_ends(conf.bootstrap, topic).items()]
    minutes = [spike_ms + i * 60_000 for i in range(args.minutes)]
    readings = read_cpu_around(minutes, component_pids(stack, workers))
    time.sleep(max(0.0, (minutes[-1] - now_ms()) / 1000 + READ_AFTER_S))
    fired_at, ran_at, outcomes = read_spikes(conf.bootstrap, starts, f"spike-{run}", minutes,
                                             args.jobs, deadline_ms=minutes[-1] + RUNS_WAIT_S * 1000)
    pids = [processes.alive(stack.pidfile(name)) for name in workers]
    rss = [rss_peak_mib(pid) for pid in pids if pid]
    stop(emitter, spike, idle)

    figures: dict[str, object] = {
        "jobs due in the same second": args.jobs,
        "idle schedules loaded": args.idle,
        "load: produce s": round(produced_s, 1),
        "load: indexed by workers s": round(loaded_s, 1),
        "worker peak RSS MiB": rss,
    }
    for i, minute in enumerate(minutes):
        name = "first spike" if i == 0 else f"spike {i + 1} (a minute later)" if i == 1 else \
            f"spike {i + 1}"
        figures[name] = spike_figures(fired_at[minute], ran_at[minute], outcomes[minute],
                                      minute, readings[minute])
    report("spike", figures, {"workers": args.workers, "jobs": args.jobs, "idle": args.idle,
                              "minutes": args.minutes})


Readings = list[tuple[float, dict[str, float]]]  # (when, CPU seconds so far per component)


def read_cpu_around(minutes: list[int], roots: dict[str, int]) -> dict[int, Readings]:
    """Timers that read every component's CPU (and the JVMs' JIT compiler threads') from
    ``CPU_WINDOW_S[0]`` before each spike to ``CPU_WINDOW_S[1]`` after it."""
    readings: dict[int, Readings] = {minute: [] for minute in minutes}

    def read(minute: int) -> None:
        used = cpu_seconds(roots) | jit_cpu_seconds(roots)
        readings[minute].append((time.monotonic(), used))

    for minute in minutes:
        for at_s in (-CPU_WINDOW_S[0], CPU_WINDOW_S[1]):
            timer = threading.Timer((minute - now_ms()) / 1000 + at_s, read, (minute,))
            timer.daemon = True
            timer.start()
    return readings


def read_spikes(bootstrap: str, starts: list[TopicPartition], prefix: str, minutes: list[int],
                jobs: int, deadline_ms: int
                ) -> tuple[dict[int, list[int]], dict[int, list[int]], dict[int, dict[str, int]]]:
    """Per spike: when each of its fired records was produced (CreateTime), when each of its
    ledger records was, and the outcomes; read from ``starts`` until every spike's runs are in
    or ``deadline_ms``."""
    by_suffix = {"@" + fire_id("", minute).split("@")[1]: minute for minute in minutes}
    fired_at: dict[int, list[int]] = {minute: [] for minute in minutes}
    ran_at: dict[int, list[int]] = {minute: [] for minute in minutes}
    outcomes: dict[int, dict[str, int]] = {minute: {} for minute in minutes}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{prefix}",
                         "enable.auto.commit": False})
    consumer.assign(starts)  # from where the topics ended before the spikes
    while sum(map(len, ran_at.values())) < jobs * len(minutes) and now_ms() < deadline_ms:
        for msg in consumer.consume(10_000, 1.0):
            key = msg.key().decode() if not msg.error() else ""
            if not key.startswith(prefix):
                continue
            if msg.topic() == FIRED.name:
                nominal = codec().decode(msg.value())["nominal_ms"]
                if nominal in fired_at:
                    fired_at[nominal].append(msg.timestamp()[1])  # CreateTime: when produced
            elif (minute := by_suffix.get(key[key.rfind("@"):])) is not None:
                ran_at[minute].append(msg.timestamp()[1])
                outcome = codec().decode(msg.value())["outcome"]
                outcomes[minute][outcome] = outcomes[minute].get(outcome, 0) + 1
    consumer.close()
    return fired_at, ran_at, outcomes


def spike_figures(fired_at: list[int], ran_at: list[int], outcomes: dict[str, int],
                  minute: int, readings: Readings) -> dict[str, object]:
    """One spike's figures: fire lag (produced minus nominal) and run lag (ledger minus
    nominal), and where the box's cores went around it."""
    lags = [at - minute for at in fired_at]
    runs = [at - minute for at in ran_at]
    fire_span_s = max(1, max(fired_at) - min(fired_at)) / 1000 if fired_at else float("nan")
    return {
        "fires recorded": len(lags),
        "fires/s (first to last fire)": round(len(lags) / fire_span_s) if lags else 0,
        "fire lag p50 ms": percentile(lags, 50),
        "fire lag p99 ms": percentile(lags, 99),
        "fire lag max ms": max(lags) if lags else None,
        "runs recorded (ledger)": len(runs),
        "run outcomes": outcomes,
        "runs/s (spike to last run)": round(len(runs) / (max(runs) / 1000)) if runs else 0,
        "run lag p50 ms": percentile(runs, 50),
        "run lag p99 ms": percentile(runs, 99),
        "run lag max ms": max(runs) if runs else None,
        f"cores used from {CPU_WINDOW_S[0]:.0f} s before to {CPU_WINDOW_S[1]:.0f} s after":
            cores_between(readings),
    }


def cores_between(readings: Readings) -> dict[str, float] | None:
    """Each component's cores between the two readings, over the time that really passed
    between them (a reading taken late must not inflate or shrink the figure)."""
    if len(readings) != 2:
        return None
    (first_at, first), (last_at, last) = sorted(readings, key=lambda reading: reading[0])
    return cpu_share(first, last, last_at - first_at)


def stop(emitter: Emitter, *groups: list[str]) -> None:
    """Delete the benchmark's jobs (tombstones), once the broker has them."""
    for ids in groups:
        for job_id in ids:
            emitter.produce(JOBS, job_id, None)
    left = emitter.flush(120)
    if left:
        print(f"warning: {left} of the job deletions not acknowledged by the broker in 120 s; "
              "the next run's load waits for the rest", flush=True)


if __name__ == "__main__":
    main()
