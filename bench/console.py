"""Page loads of the web console: time to first byte and to the complete page of a job with
10,000 slots of history, on the running local stack.

Why the history is written straight into Postgres: what is measured is the page (its one read
of a page of the ledger, its rendering), not how fast 10,000 slots can be decided; rows shaped
as the ledger's sink writes them (``connectors/ledger.sql``), decisions mixed as a paused and
sometimes failing job's would be, are the same to the page. ``--other-rows`` adds other jobs'
rows around them, since the runs query has no index of its own (only the primary key on
``record_id``): it reads the table, so its time grows with the ledger, not with the job.

    .venv/bin/python -m bench.console [--slots 10000] [--requests 50] [--other-rows 0]
"""

from __future__ import annotations

import argparse
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import psycopg

from bench.common import percentile, report
from cli.demo import wait_for_key
from stack.local import Stack
from streams.adapters import tenants
from streams.runtime import settings

DECISIONS = (("fired", "succeeded", None, 200), ("fired", "failed", "HTTP 500", 500),
             ("skipped_paused", "not_run", "job is paused", None),
             ("expired_stale", "not_run", "later than max_lateness_s", None))


def fill_ledger(dsn: str, tenant: str, job_id: str, slots: int, other_rows: int) -> None:
    """``slots`` rows of the job, one a minute back from now, and ``other_rows`` of other jobs."""
    start = datetime.now(UTC).replace(tzinfo=None, second=0, microsecond=0)
    rows = []
    for i in range(slots):
        nominal = start - timedelta(minutes=i + 1)
        decision, outcome, error, status = DECISIONS[0 if i % 10 else (i // 10) % 4]
        fire_id = f"{job_id}@{nominal.isoformat()}Z"
        rows.append((fire_id, "job", tenant, job_id, fire_id, nominal, decision, error, 3, 1,
                     1 if outcome != "not_run" else 0, outcome, status, error, nominal, nominal))
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO ledger (record_id, kind, tenant, job_id, fire_id, nominal_time, decision,"
            " reason, lateness_ms, epoch, attempts, outcome, status_code, error, fired_at,"
            " completed_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
            " %s) ON CONFLICT (record_id) DO NOTHING", rows)
        if other_rows:
            cur.execute(
                "INSERT INTO ledger (record_id, kind, tenant, job_id, fire_id, nominal_time,"
                " decision, lateness_ms, epoch, attempts, outcome) SELECT 'bench-other-' || %s"
                " || '-' || g, 'job', 'bench-other', 'other-' || (g %% 1000), 'x', now(), 'fired',"
                " 0, 1, 1, 'succeeded' FROM generate_series(1, %s) g", (uuid.uuid4().hex[:8],
                                                                       other_rows))


def timed(client: httpx.Client, url: str, requests: int) -> dict[str, float]:
    """p50/p95/max of time to the response's headers and to its last byte, in ms."""
    first, complete = [], []
    for _ in range(requests):
        began = time.perf_counter()
        with client.stream("GET", url) as answer:
            headers_at = time.perf_counter()
            body = answer.read()
            done_at = time.perf_counter()
        assert answer.status_code == 200, (answer.status_code, body[:300])
        first.append((headers_at - began) * 1000)
        complete.append((done_at - began) * 1000)
    return {"ttfb p50 ms": round(percentile(first, 50), 1),
            "ttfb p95 ms": round(percentile(first, 95), 1),
            "complete p50 ms": round(percentile(complete, 50), 1),
            "complete p95 ms": round(percentile(complete, 95), 1),
            "complete max ms": round(max(complete), 1), "bytes": len(body)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--other-rows", type=int, default=0)
    args = parser.parse_args()
    conf = settings.load()
    Stack(conf).up(with_app=True)
    name = f"bench{uuid.uuid4().hex[:8]}"
    key = tenants.create(conf.bootstrap, name, allowed_targets=["127.0.0.1"],
                         requests_per_s=10_000)
    auth = {"Authorization": f"Bearer {key}"}
    wait_for_key(conf.api_url, auth)
    job = httpx.post(f"{conf.api_url}/v1/jobs", headers=auth, timeout=30, json={
        "id": "history", "name": "10,000 slots", "paused": True,
        "schedule": {"cron": "* * * * *"},
        "target": {"type": "webhook", "url": "http://127.0.0.1:9/hook"}}).json()
    fill_ledger(conf.pg_dsn, name, f"{name}/history", args.slots, args.other_rows)
    with httpx.Client(base_url=conf.api_url, timeout=60) as client:
        assert client.post("/ui/login", data={"key": key}).status_code == 303
        page = f"/ui/jobs/{job['id']}"
        runs = client.get(f"/v1/jobs/{job['id']}/runs?limit=50", headers=auth).json()
        figures = {
            "job page (newest 50 slots)": timed(client, page, args.requests),
            "job page, an older page": timed(client, f"{page}?cursor="
                                         f"{runs['next_cursor']}", args.requests),
            "job page, only slots that did not run": timed(client, f"{page}?only=not_run",
                                                           args.requests),
            "jobs list": timed(client, "/ui/jobs", args.requests),
        }
    with psycopg.connect(conf.pg_dsn) as conn:
        ledger_rows = conn.execute("SELECT count(*) FROM ledger").fetchone()
    report("console", figures, {"slots": args.slots, "requests": args.requests,
                                "other_rows": args.other_rows,
                                "ledger_rows": ledger_rows[0] if ledger_rows else None})


if __name__ == "__main__":
    main()
