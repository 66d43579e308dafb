"""The seed-001 blueprint, measured on the same machine: a PostgreSQL table of next-run times
polled with ``SELECT … FOR UPDATE SKIP LOCKED`` by P processes, each due row published to Kafka.

    .venv/bin/python -m bench.baseline_pg [--jobs 100000] [--idle 1000000] [--processes 2]

Same spike as ``bench.spike``: N rows due in the same second among M idle rows. Each poller
claims up to ``--batch`` due rows, advances them, commits, and produces one record per row to
``bench.baseline-fired`` (as the blueprint pushes fires to Kafka); lag = produce time − nominal.
"""

from __future__ import annotations

import argparse
import io
import multiprocessing
import time

import psycopg
from confluent_kafka import Producer

from bench.common import count_at_least, percentile, report
from stack.local import Stack
from streams.runtime import settings
from streams.runtime.kafka_config import producer_config

CLAIM = """
WITH due AS (
    SELECT job_id FROM bench_next_run WHERE next_run_at <= now()
    ORDER BY next_run_at LIMIT %s FOR UPDATE SKIP LOCKED)
UPDATE bench_next_run r SET next_run_at = r.next_run_at + interval '1 year'
FROM due WHERE r.job_id = due.job_id
RETURNING r.job_id, (extract(epoch FROM r.next_run_at - interval '1 year') * 1000)::bigint
"""


def poller(dsn: str, bootstrap: str, batch: int, stop_at: float, out: multiprocessing.Queue
           ) -> None:
    producer = Producer({**producer_config(bootstrap), "linger.ms": 5})
    lags: list[int] = []
    with psycopg.connect(dsn, autocommit=False) as conn:
        while time.time() < stop_at:
            rows = conn.execute(CLAIM, (batch,)).fetchall()
            conn.commit()
            if not rows:
                time.sleep(0.05)
                continue
            for job_id, nominal in rows:
                producer.produce("bench.baseline-fired", key=job_id, value=str(nominal))
                lags.append(time.time_ns() // 1_000_000 - nominal)
            producer.poll(0)
    producer.flush(30)
    out.put(lags)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=count_at_least(1), default=100_000)
    parser.add_argument("--idle", type=count_at_least(0), default=1_000_000)
    parser.add_argument("--processes", type=count_at_least(1), default=2)
    parser.add_argument("--batch", type=count_at_least(1), default=500)
    args = parser.parse_args()
    conf = settings.load()
    Stack(conf).up(with_app=False)

    with psycopg.connect(conf.pg_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_next_run")
        conn.execute("CREATE TABLE bench_next_run (job_id text PRIMARY KEY, "
                     "next_run_at timestamptz NOT NULL, cron text NOT NULL)")
        started = time.monotonic()
        spike_s = int(time.time()) + 30 + args.idle // 100_000 * 3
        buf = io.StringIO()
        for i in range(args.idle):
            buf.write(f"idle-{i}\t2100-01-01 00:00:00+00\t0 0 1 1 *\n")
        for i in range(args.jobs):
            buf.write(f"spike-{i}\t{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(spike_s))}+00"
                      "\t0 * * * * *\n")
        with conn.cursor().copy("COPY bench_next_run FROM STDIN") as copy:
            copy.write(buf.getvalue())
        conn.execute("CREATE INDEX ON bench_next_run (next_run_at)")
        conn.execute("ANALYZE bench_next_run")
        load_s = time.monotonic() - started
    print(f"loaded {args.idle + args.jobs} rows in {load_s:.1f}s; spike at {spike_s}", flush=True)

    out: multiprocessing.Queue = multiprocessing.Queue()
    stop_at = spike_s + 60
    procs = [multiprocessing.Process(target=poller, args=(conf.pg_dsn, conf.bootstrap, args.batch,
                                                          stop_at, out))
             for _ in range(args.processes)]
    for proc in procs:
        proc.start()
    lags = [lag for _ in procs for lag in out.get()]
    for proc in procs:
        proc.join()
    with psycopg.connect(conf.pg_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE bench_next_run")
    spike_lags = [lag for lag in lags if lag < 120_000]
    span_s = (max(spike_lags) - min(spike_lags)) / 1000 if spike_lags else float("nan")
    report("baseline_pg", {
        "jobs due in the same second": args.jobs,
        "idle rows": args.idle,
        "fires recorded": len(spike_lags),
        "fires/s (first to last fire)": round(len(spike_lags) / max(span_s, 0.001)),
        "fire lag p50 ms": percentile(spike_lags, 50),
        "fire lag p99 ms": percentile(spike_lags, 99),
        "fire lag max ms": max(spike_lags) if spike_lags else None,
    }, {"processes": args.processes, "batch": args.batch})


if __name__ == "__main__":
    main()
