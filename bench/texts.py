"""A burst of text reminders: N sms jobs due in the same second, sent through the local End
User Messaging SMS server at the account's rate; optionally a worker SIGKILLed mid-burst.

    .venv/bin/python -m bench.texts [--texts 10000] [--workers 1] [--mps 100] [--kill-at 0.3]

Runs on the real local stack (started if needed). The jobs are written straight to the jobs
topic (the API's validation is not what is measured), one number each, as a slot at a minute
boundary far enough ahead that the workers have indexed them all, misfire ``fire_all`` with ten
minutes of lateness and 30 attempts (throttling is retried, never dropped). The account's rate
is the SMS server's: ``--mps`` message parts a second, as AWS's origination numbers have
(its ``max_rate_per_s`` fault: a text over it is answered ``ThrottlingException``, as AWS does).

The headline is the user's figure, read from the SMS server's own log (``sms/sent.jsonl``: a text
accepted is a text sent): texts a second from the first to the last accepted, the lag from the
slot's nominal time to its acceptance p50/p99/max, numbers texted more than once (must be 0),
and the ledger's outcome for every slot (PostgreSQL's ledger table, once all are written).

``--kill-at F``: once F of the texts are accepted, worker-1 is SIGKILLed and started again at
once. At most once per text: the restarted worker finds the intents of the texts whose requests
were out at the kill and records them ``unknown`` without sending them again. Printed: the
unknowns, how many of them the server had accepted (sent) and how many it had not (the request
died on the wire or had not left), against the bound: the requests a worker has out at once
(the executor's per-host limit, ``CRONSTREAM_RUNS_PER_HOST``: every text is in one lane,
``targets.host_of``). Afterwards every benchmark job is deleted (tombstones).
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench.common import count_at_least, percentile, report, stack_with_workers
from stack import processes
from streams.adapters import tenants
from streams.runtime.clock import now_ms
from streams.runtime.codec import codec
from streams.runtime.emit import Emitter
from streams.topology import JOBS

TENANT = "bench-texts"
ORIGINATION = "+18005550100"
FIRE_CONTEXT = "cronstream-fire"
INDEX_RATE = 5_000  # jobs a second the workers index, at least (the slot is planned after)
MARGIN_S = 20
QUIET_S = 120  # no new text for this long after the last one: the burst is over


def text_job(job_id: str, number: str, at_ms: int, now: int) -> bytes:
    """One text reminder as the API would have written it: a single slot at ``at_ms``."""
    return codec().encode("Job", {
        "job_id": job_id, "tenant": TENANT, "revision": 1,
        "schedule": {"cron": "0 * * * * *", "timezone": "UTC", "start_ms": at_ms,
                     "end_ms": at_ms + 1000},
        "target": {"type": "sms", "sms_to": number, "sms_body": f"Reminder for {number}",
                   "sms_origination": ORIGINATION},
        "misfire_policy": "fire_all", "max_lateness_s": 600, "retry_max_attempts": 30,
        "retry_initial_backoff_s": 0.5, "retry_max_backoff_s": 5.0,
        "created_ms": now, "updated_ms": now,
    })


def numbers(prefix: int, count: int) -> list[str]:
    """Distinct E.164 numbers, one a job (+1 555 then the job's index)."""
    return [f"+1555{prefix:01d}{i:06d}" for i in range(count)]


def accepted(log: Path, start: int, prefix: str) -> list[dict[str, Any]]:
    """The texts of this run the SMS server accepted, from its log after ``start``."""
    if not log.exists():
        return []
    with log.open("rb") as lines:
        lines.seek(start)
        return [text for line in lines.read().splitlines() if line
                and str((text := json.loads(line)).get("context", {}).get(FIRE_CONTEXT, ""))
                .startswith(prefix)]


def ledger_outcomes(dsn: str, prefix: str) -> Counter[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT outcome, count(*) FROM ledger WHERE job_id LIKE %s "
                            "GROUP BY outcome", (f"{prefix}%",)).fetchall()
    return Counter({str(outcome): int(n) for outcome, n in rows})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=count_at_least(1), default=10_000)
    parser.add_argument("--workers", type=count_at_least(1), default=1)
    parser.add_argument("--mps", type=count_at_least(1), default=100,
                        help="the account's rate: message parts a second the SMS server accepts")
    parser.add_argument("--kill-at", type=float, default=None,
                        help="SIGKILL worker-1 once this share of the texts is accepted")
    args = parser.parse_args()
    conf, stack, workers = stack_with_workers(args.workers)
    sms_url = conf.local_sms_endpoint
    log = conf.home / "sms" / "sent.jsonl"
    tenants.create(conf.bootstrap, TENANT, partitions=conf.partitions,
                   sms_originations=[ORIGINATION])
    run = time.strftime("%H%M%S")
    prefix = f"texts-{run}-"
    at_ms = int(-(-(now_ms() + (args.texts / INDEX_RATE + MARGIN_S) * 1000) // 60_000) * 60_000)
    emitter = Emitter(conf.bootstrap, "bench-texts")
    ids = [f"{prefix}{i:06d}" for i in range(args.texts)]
    now = now_ms()
    for job_id, number in zip(ids, numbers(int(run) % 10, args.texts), strict=True):
        emitter.produce(JOBS, job_id, text_job(job_id, number, at_ms, now))
    emitter.flush(120)
    start = log.stat().st_size if log.exists() else 0
    httpx.post(f"{sms_url}/_local/faults", json={"max_rate_per_s": args.mps},
               timeout=5).raise_for_status()
    print(f"{args.texts} texts due at {time.strftime('%H:%M:%S', time.gmtime(at_ms / 1000))} "
          f"UTC; the SMS server accepts {args.mps} message parts a second")
    killed_ms: int | None = None
    last_count, last_change = 0, time.monotonic()
    try:
        while True:
            texts = accepted(log, start, prefix)
            if len(texts) != last_count:
                last_count, last_change = len(texts), time.monotonic()
            if args.kill_at is not None and killed_ms is None and \
                    len(texts) >= args.kill_at * args.texts:
                assert processes.stop(stack.home.pidfile("worker-1"), timeout_s=30,
                                      sig=signal.SIGKILL), "worker-1 was not running"
                killed_ms = now_ms()
                print(f"worker-1 SIGKILLed with {len(texts)} texts accepted; started again")
                stack.start_worker("worker-1", ready_timeout_s=900)
            if len(texts) >= args.texts or (now_ms() > at_ms and
                                             time.monotonic() - last_change > QUIET_S):
                break
            time.sleep(1.0)
        deadline = time.monotonic() + 600
        while sum((outcomes := ledger_outcomes(conf.pg_dsn, prefix)).values()) < args.texts \
                and time.monotonic() < deadline:
            time.sleep(2.0)
    finally:
        httpx.post(f"{sms_url}/_local/faults", json={}, timeout=5)
        for job_id in ids:
            emitter.produce(JOBS, job_id, None)
        emitter.flush(120)
    texts = accepted(log, start, prefix)
    per_number = Counter(str(t["to"]) for t in texts)
    lags = [int(t["at_ms"]) - at_ms for t in texts]
    span_s = (max(t["at_ms"] for t in texts) - min(t["at_ms"] for t in texts)) / 1000 if texts \
        else 0.0
    figures: dict[str, Any] = {
        "texts due": args.texts, "texts accepted (SMS server's log)": len(per_number),
        "numbers texted more than once": sum(1 for n in per_number.values() if n > 1),
        "texts/s, first to last accepted": round(len(texts) / span_s, 1) if span_s else None,
        "account rate (message parts/s)": args.mps,
        "lag p50/p99/max s": "/".join(f"{percentile(lags, p) / 1000:.1f}" for p in (50, 99, 100))
        if lags else None,
        "ledger outcomes": dict(outcomes),
    }
    if killed_ms is not None:
        unknown = outcomes.get("unknown", 0)
        figures["unknown after the kill"] = unknown
    report("texts", figures, {"texts": args.texts, "workers": args.workers, "mps": args.mps,
                              "kill_at": args.kill_at, "workers_started": workers})


if __name__ == "__main__":
    main()
