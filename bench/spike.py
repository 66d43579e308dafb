"""Top-of-minute spike: N jobs due in the same second, with M idle schedules loaded.

    .venv/bin/python -m bench.spike [--jobs 100000] [--idle 1000000] [--workers 2]

Runs on the real local stack (started if needed). Jobs are written straight to the jobs topic
(the API's validation is not what is measured): the idle ones as ``0 0 1 1 *``, then the spike
jobs as ``0 * * * * *`` (every minute at second 0) starting at a minute boundary far enough
ahead that the workers have indexed them all before it, so the measured slot is the first one
of every spike job and no earlier spike is still running when it comes. Every fired record of
that slot is read back from ``cronstream.fired`` (once the spike is over: reading it while it
happened took cores from it) and its fire lag (the record's CreateTime, set when the scheduler
produced it, minus the nominal time) measured; every ledger record of it from
``cronstream.ledger`` gives the run lag (the executor's record of the outcome, minus the nominal
time): what a user of the target sees. Afterwards all benchmark jobs are deleted (tombstones).
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
    cpu_seconds,
    cpu_share,
    percentile,
    report,
    rss_peak_mib,
    stack_with_workers,
    topic_ends,
    wait_consumed,
)
from stack import processes
from streams.codec import codec
from streams.emit import Emitter
from streams.schedule import fire_id, now_ms
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


def load(emitter: Emitter, prefix: str, count: int, cron: str,
         start_ms: int | None = None) -> list[str]:
    ids = [f"{prefix}-{i:07d}" for i in range(count)]
    now = now_ms()
    for job_id in ids:
        emitter.produce(JOBS, job_id, job(job_id, cron, now, start_ms=start_ms))
    emitter.flush(120)
    return ids


def plan_spike(jobs: int) -> int:
    """The first minute boundary the spike jobs can be indexed before (see SPIKE_INDEX_RATE)."""
    earliest = now_ms() + (jobs / SPIKE_INDEX_RATE + SPIKE_MARGIN_S) * 1000
    return int(-(-earliest // 60_000) * 60_000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--idle", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=2)
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
    readings: list[tuple[float, dict[str, float]]] = []  # (when, CPU seconds so far)
    roots = component_pids(stack, workers)
    for at_s in (-CPU_WINDOW_S[0], CPU_WINDOW_S[1]):
        timer = threading.Timer((spike_ms - now_ms()) / 1000 + at_s, lambda: readings.append(
            (time.monotonic(), cpu_seconds(roots))))
        timer.daemon = True
        timer.start()
    time.sleep(max(0.0, (spike_ms - now_ms()) / 1000 + READ_AFTER_S))
    consumer = Consumer({"bootstrap.servers": conf.bootstrap, "group.id": f"bench-{run}",
                         "enable.auto.commit": False})
    consumer.assign(starts)  # from where the topics ended before the spike
    fired_at: list[int] = []
    ran_at: list[int] = []
    outcomes: dict[str, int] = {}
    deadline = time.monotonic() + (spike_ms - now_ms()) / 1000 + RUNS_WAIT_S
    slot = "@" + fire_id("", spike_ms).split("@")[1]
    prefix = f"spike-{run}"
    while len(ran_at) < args.jobs and time.monotonic() < deadline:
        for msg in consumer.consume(10_000, 1.0):
            key = msg.key().decode() if not msg.error() else ""
            if not key.startswith(prefix):
                continue
            if msg.topic() == FIRED.name:
                if codec().decode(msg.value())["nominal_ms"] == spike_ms:
                    fired_at.append(msg.timestamp()[1])  # CreateTime: when it was produced
            elif key.endswith(slot):
                ran_at.append(msg.timestamp()[1])
                outcome = codec().decode(msg.value())["outcome"]
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
    consumer.close()
    pids = [processes.alive(stack.pidfile(name)) for name in workers]
    rss = [rss_peak_mib(pid) for pid in pids if pid]
    stop(emitter, spike, idle)

    lags = [at - spike_ms for at in fired_at]
    runs = [at - spike_ms for at in ran_at]
    fire_span_s = max(1, max(fired_at) - min(fired_at)) / 1000 if fired_at else float("nan")
    report("spike", {
        "jobs due in the same second": args.jobs,
        "idle schedules loaded": args.idle,
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
        "load: produce s": round(produced_s, 1),
        "load: indexed by workers s": round(loaded_s, 1),
        "worker peak RSS MiB": rss,
        f"cores used from {CPU_WINDOW_S[0]:.0f} s before to {CPU_WINDOW_S[1]:.0f} s after the spike":
            cores_between(readings),
    }, {"workers": args.workers, "jobs": args.jobs, "idle": args.idle})


def cores_between(readings: list[tuple[float, dict[str, float]]]) -> dict[str, float] | None:
    """Each component's cores between the two readings, over the time that really passed
    between them (a reading taken late must not inflate or shrink the figure)."""
    if len(readings) != 2:
        return None
    (first_at, first), (last_at, last) = sorted(readings, key=lambda reading: reading[0])
    return cpu_share(first, last, last_at - first_at)


def stop(emitter: Emitter, *groups: list[str]) -> None:
    """Delete the benchmark's jobs (tombstones)."""
    for ids in groups:
        for job_id in ids:
            emitter.produce(JOBS, job_id, None)
    emitter.close()


if __name__ == "__main__":
    main()
