"""Top-of-minute spike: N jobs due in the same second, with M idle schedules loaded.

    .venv/bin/python -m bench.spike [--jobs 100000] [--idle 1000000] [--workers 2]

Runs on the real local stack (started if needed). Jobs are written straight to the jobs topic
(the API's validation is not what is measured), the spike jobs as ``0 * * * * *`` (every minute at
second 0) and the idle ones as ``0 0 1 1 *``. Once the workers have indexed them all (consumer lag
0), the next minute boundary is the spike: every fired record with that nominal time is read back
from ``cronstream.fired`` and its lag (the record's CreateTime, set when the scheduler produced
it, minus the nominal time) measured. Afterwards all benchmark jobs
are deleted (tombstones). Target: 10k fires/s with p99 lag <= 1 s.
"""

from __future__ import annotations

import argparse
import time
import uuid

from confluent_kafka import Consumer, TopicPartition

from bench.common import (
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
from streams.schedule import now_ms
from streams.topology import FIRED, JOBS


def job(job_id: str, cron: str, now: int, misfire_policy: str = "skip",
        max_lateness_s: int = 60) -> bytes:
    """A benchmark job as the API would have written it, firing into a Kafka topic."""
    return codec().encode("Job", {
        "job_id": job_id, "tenant": "bench", "revision": 1,
        "schedule": {"cron": cron, "timezone": "UTC"},
        "target": {"type": "kafka", "topic": "bench.fires", "value": "tick"},
        "misfire_policy": misfire_policy, "max_lateness_s": max_lateness_s,
        "retry_max_attempts": 1, "created_ms": now, "updated_ms": now,
    })


def load(emitter: Emitter, prefix: str, count: int, cron: str) -> list[str]:
    ids = [f"{prefix}-{i:07d}" for i in range(count)]
    now = now_ms()
    for job_id in ids:
        emitter.produce(JOBS, job_id, job(job_id, cron, now))
    emitter.flush(120)
    return ids


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
    spike = load(emitter, f"spike-{run}", args.jobs, "0 * * * * *")
    produced_s = time.monotonic() - started
    wait_consumed(conf.bootstrap, JOBS, every_s=2)
    loaded_s = time.monotonic() - started
    print(f"loaded {len(idle) + len(spike)} jobs: produced in {produced_s:.1f}s, indexed by the "
          f"workers in {loaded_s:.1f}s", flush=True)

    offsets = topic_ends(conf.bootstrap, FIRED.name)
    spike_ms = (now_ms() // 60_000 + 1) * 60_000
    if spike_ms - now_ms() < 5_000:
        spike_ms += 60_000
    consumer = Consumer({"bootstrap.servers": conf.bootstrap, "group.id": f"bench-{run}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(FIRED.name, p, o) for p, o in offsets.items()])
    lags: list[int] = []
    fired_at: list[int] = []
    deadline = time.monotonic() + (spike_ms - now_ms()) / 1000 + 180
    prefix = f"spike-{run}"
    while len(lags) < args.jobs and time.monotonic() < deadline:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() or not msg.key().decode().startswith(prefix):
                continue
            fired = codec().decode(msg.value())
            if fired["nominal_ms"] == spike_ms:
                produced_ms = msg.timestamp()[1]  # CreateTime: when the scheduler produced it
                lags.append(produced_ms - spike_ms)
                fired_at.append(produced_ms)
    consumer.close()
    pids = [processes.alive(stack.pidfile(name)) for name in workers]
    rss = [rss_peak_mib(pid) for pid in pids if pid]

    for ids in (spike, idle):  # stop the benchmark's jobs
        for job_id in ids:
            emitter.produce(JOBS, job_id, None)
    emitter.close()

    span_s = max(1, max(fired_at) - min(fired_at)) / 1000 if fired_at else float("nan")
    report("spike", {
        "jobs due in the same second": args.jobs,
        "idle schedules loaded": args.idle,
        "fires recorded": len(lags),
        "fires/s (first to last fire)": round(len(lags) / span_s) if lags else 0,
        "fire lag p50 ms": percentile(lags, 50),
        "fire lag p99 ms": percentile(lags, 99),
        "fire lag max ms": max(lags) if lags else None,
        "load: produce s": round(produced_s, 1),
        "load: indexed by workers s": round(loaded_s, 1),
        "worker peak RSS MiB": rss,
    }, {"workers": args.workers, "jobs": args.jobs, "idle": args.idle})


if __name__ == "__main__":
    main()
