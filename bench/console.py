"""Page loads of the web console: time to first byte and to the complete page of a job with
10,000 slots of history, and of a campaign's page during its send, on the running local stack.

Why the history is written straight into Postgres: what is measured is the page (its one read
of a page of the ledger, its rendering), not how fast 10,000 slots can be decided; rows shaped
as the ledger's sink writes them (``connectors/ledger.sql``), decisions mixed as a paused and
sometimes failing job's would be, are the same to the page. ``--other-rows`` adds other jobs'
rows around them, since the runs query has no index of its own (only the primary key on
``record_id``): it reads the table, so its time grows with the ledger, not with the job.

    .venv/bin/python -m bench.console [--slots 10000] [--requests 50] [--other-rows 0]

With ``--campaign N`` it measures the campaign page instead: a campaign of N recipients is
created and uploaded through the public API (``bench.fanout.upload_campaign``, as the fan-out
benchmark does) and scheduled; while it sends, every ``--every`` seconds, a signed-in session
loads the campaign's page (``/ui/campaigns/{id}``) and the JSON its progress bar polls
(``/ui/campaigns/{id}/progress``), each timed to the headers and to the last byte, with the
percentage done at the time (as the JSON, loaded just after the page, says). Figures are given
over the whole send and per quarter of it, since what the page costs grows with the rows the
send has written (below).

    .venv/bin/python -m bench.console --campaign 1000000 [--every 1.0] [--workers 2]

With ``--jobs N`` it measures the jobs list at size: N jobs of one tenant written straight to
the jobs topic (seven in ten active daily schedules, one in ten paused, two in ten one-offs
completed a day ago: a tenant after its spikes; each with a name and one of 100 labels), the
API started on an empty store and timed until it answers (its view has read and indexed them
all: ``api.job_store``), then the console's list (its default tab, the active jobs soonest
first; the completed and all tabs) and the API's lists (by state from the first page and from
the middle, by name prefix, by label, by id) timed, and the counts per state checked against
what was written. The workers are stopped first and left stopped (indexing N jobs would take
the box meanwhile), and the jobs are not deleted (their tombstones would be N more records for
every reader): run it in a stack home of its own and remove that afterwards.

    CRONSTREAM_HOME=/tmp/bench-10m .venv/bin/python -m bench.console --jobs 10000000

What the campaign page reads from PostgreSQL (read in ``api/console/campaigns.py`` and
``api/routes/campaigns.py``): the campaign itself comes from the API's view of its topic, not
PostgreSQL; ``get_campaign`` reads the campaign's rows of ``campaign_counts``, which the
ledger's triggers keep as the sinks write (``connectors/ledger.sql``): one row per outcome and
second of the send, a few hundred at the end of a 1M send, whatever the ledger holds; the "did
X get it?" lookup, when an address is given, reads that one recipient's row. No recipient list
is read. Until 2026-11-26 ``get_campaign`` counted the campaign's ledger rows at each load, a
scan of the ledger that cost a second per load by the end of a 1M send and halved the send's
rate (docs/performance.md). The progress JSON is the same ``get_campaign`` without the
template, and is polled by every open campaign page.
"""

from __future__ import annotations

import argparse
import json
import re
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg

from api.job_store import encode_cursor
from api.state import jobs_store_path
from bench import fanout, scale
from bench.common import count_at_least, percentile, report
from cli.demo import wait_for_key
from stack import processes
from stack.local import Stack
from streams.adapters import tenants
from streams.runtime import settings
from streams.runtime.clock import now_ms
from streams.runtime.codec import codec
from streams.runtime.emit import Emitter
from streams.topology import JOBS

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


def fetch(client: httpx.Client, url: str) -> tuple[float, float, bytes]:
    """One GET: ms to the response's headers, ms to its last byte, and the body."""
    began = time.perf_counter()
    with client.stream("GET", url) as answer:
        headers_at = time.perf_counter()
        body = answer.read()
        done_at = time.perf_counter()
    assert answer.status_code == 200, (answer.status_code, body[:300])
    return (headers_at - began) * 1000, (done_at - began) * 1000, body


def stats(first: list[float], complete: list[float]) -> dict[str, float]:
    """p50/p95/max of time to the response's headers and to its last byte, in ms."""
    return {"ttfb p50 ms": round(percentile(first, 50), 1),
            "ttfb p95 ms": round(percentile(first, 95), 1),
            "complete p50 ms": round(percentile(complete, 50), 1),
            "complete p95 ms": round(percentile(complete, 95), 1),
            "complete max ms": round(max(complete), 1) if complete else float("nan")}


def timed(client: httpx.Client, url: str, requests: int) -> dict[str, float]:
    """``stats`` of ``requests`` loads of ``url`` one after the other, and the page's size."""
    first, complete, body = [], [], b""
    for _ in range(requests):
        ttfb, done, body = fetch(client, url)
        first.append(ttfb)
        complete.append(done)
    return {**stats(first, complete), "bytes": len(body)}


def by_progress(samples: list[tuple[int, float, float]], bands: int = 4
                ) -> dict[str, dict[str, float | int]]:
    """``stats`` of (percent done, ttfb ms, complete ms) samples over the whole send and per
    band of progress ("0-24 %" ... "75-100 %" for four), each with its number of samples. Per
    band because the campaign page counts the rows the send has written so far: one figure over
    the send would hide a page that is slow only near its end. Empty bands are left out."""
    def of(chosen: list[tuple[int, float, float]]) -> dict[str, float | int]:
        return {**stats([s[1] for s in chosen], [s[2] for s in chosen]), "samples": len(chosen)}

    figures = {"whole send": of(samples)}
    width = 100 // bands
    for band in range(bands):
        low, high = band * width, 100 if band == bands - 1 else (band + 1) * width - 1
        chosen = [s for s in samples if low <= min(100, max(0, s[0])) <= high]
        if chosen:
            figures[f"{low}-{high} %"] = of(chosen)
    return figures


def sign_in(console: httpx.Client, key: str) -> None:
    """Sign the console client in as a browser does: the form (its CSRF token and cookie),
    then the key."""
    form = console.get("/ui/login")
    token = re.search(r'name="login_token" value="([^"]+)"', form.text)
    assert form.status_code == 200 and token, form.text[:200]
    answer = console.post("/ui/login", data={"key": key, "login_token": token.group(1)})
    assert answer.status_code == 303, answer.text[:200]


def campaign_send(recipients: int, every_s: float, workers: int) -> None:
    """The campaign page and its progress JSON timed while a campaign of ``recipients`` sends
    (see the module's docstring)."""
    conf = settings.load()
    Stack(conf).up(with_app=True, workers=workers)
    key = tenants.create(conf.bootstrap, f"bench{uuid.uuid4().hex[:8]}",
                         partitions=conf.partitions, senders=["example.com"])
    auth = {"Authorization": f"Bearer {key}"}
    wait_for_key(conf.api_url, auth)
    samples: dict[str, list[tuple[int, float, float]]] = {"page": [], "progress": []}
    with httpx.Client(base_url=conf.api_url, headers=auth, timeout=600) as api, \
            httpx.Client(base_url=conf.api_url, timeout=60) as console:
        created, uploaded, _ = fanout.upload_campaign(api, uuid.uuid4().hex[:8], recipients)
        sign_in(console, key)
        page = f"/ui/campaigns/{created['id']}"
        assert api.post(f"/v1/campaigns/{created['id']}/schedule").status_code == 200
        started = time.monotonic()
        view: dict[str, Any] = {}
        while time.monotonic() - started < 3600:
            tick = time.monotonic()
            page_ttfb, page_done, _ = fetch(console, page)
            json_ttfb, json_done, body = fetch(console, f"{page}/progress")
            view = json.loads(body)
            samples["page"].append((view["percent"], page_ttfb, page_done))
            samples["progress"].append((view["percent"], json_ttfb, json_done))
            print(f"{time.monotonic() - started:6.1f}s {view['percent']:3d} % "
                  f"{view['rate_per_s']:>9,.0f}/s  page {page_ttfb:6.1f} / {page_done:6.1f} ms"
                  f"  progress {json_ttfb:6.1f} / {json_done:6.1f} ms", flush=True)
            if view["counts"]["pending"] == 0 or view["status"] not in ("scheduled", "sending"):
                break
            time.sleep(max(0.0, every_s - (time.monotonic() - tick)))
        send_s = time.monotonic() - started
    with psycopg.connect(conf.pg_dsn) as conn:
        ledger_rows = conn.execute("SELECT count(*) FROM ledger").fetchone()
    report("console-campaign", {
        "campaign page": by_progress(samples["page"]),
        "progress JSON": by_progress(samples["progress"]),
        "recipients": uploaded["recipients"],
        "send s (schedule to no recipient pending)": round(send_s, 1),
        "campaign status": {"status": view.get("status"), **view.get("counts", {})},
    }, {"campaign": recipients, "every_s": every_s, "workers": workers,
        "ledger_rows": ledger_rows[0] if ledger_rows else None})


DAY_MS = 86_400_000


def sized_job(tenant: str, i: int, now: int) -> tuple[str, str, bytes]:
    """The ``i``-th job of the list at size: its key, its state as written, its record."""
    kind = i % 10
    state = "completed" if kind >= 8 else "paused" if kind == 7 else "active"
    job_id = f"{tenant}/j{i:08d}"
    when = now - DAY_MS if state == "completed" else now
    return job_id, state, codec().encode("Job", {
        "job_id": job_id, "tenant": tenant, "revision": 1, "paused": state == "paused",
        "name": f"team-{i % 100:02d} job {i}", "labels": {"team": f"t{i // 10 % 100:02d}"},
        "schedule": {"cron": None if state == "completed" else "H H * * *", "timezone": "UTC",
                     "at_ms": when if state == "completed" else None},
        "target": {"type": "webhook", "url": "http://127.0.0.1:9/hook"},
        "created_ms": when, "updated_ms": when})


def jobs_at_size(count: int, requests: int) -> None:
    """The jobs list at ``count`` jobs (the module's docstring)."""
    conf = settings.load()
    stack = Stack(conf)
    stack.up(with_app=False)
    for app in stack.app_names():  # the API is started below, timed; the workers stay stopped
        processes.stop(stack.pidfile(app))
    name = f"bench{uuid.uuid4().hex[:8]}"
    key = tenants.create(conf.bootstrap, name, partitions=conf.partitions,
                         allowed_targets=["127.0.0.1"], requests_per_s=10_000)
    emitter = Emitter(conf.bootstrap, "bench-console", **{"linger.ms": 50})
    written = {"active": 0, "paused": 0, "completed": 0}
    began, now = time.monotonic(), now_ms()
    for i in range(count):
        job_id, state, value = sized_job(name, i, now)
        emitter.produce(JOBS, job_id, value)
        written[state] += 1
        if i % 1_000_000 == 999_999:
            print(f"{i + 1:,} jobs produced in {time.monotonic() - began:.0f}s", flush=True)
    emitter.flush(600)
    emitter.close()
    produced_s = time.monotonic() - began
    print(f"{count:,} jobs produced in {produced_s:.1f}s", flush=True)
    api_ready_s, api_peak_mib = scale.time_api_start(stack, conf, wipe=True)  # reads them all
    print(f"API ready in {api_ready_s:.1f}s from an empty store", flush=True)
    auth = {"Authorization": f"Bearer {key}"}
    wait_for_key(conf.api_url, auth)
    middle = encode_cursor(now + DAY_MS // 2, "")  # the jobs due in 12 h and after
    with httpx.Client(base_url=conf.api_url, timeout=120) as client:
        counts = client.get("/v1/jobs?limit=1", headers=auth).json()["counts"]
        assert counts == written, (counts, written)
        sign_in(client, key)
        figures: dict[str, Any] = {
            "console: jobs list, its default tab (active, soonest next run first)":
                timed(client, "/ui/jobs", requests),
            "console: the completed tab": timed(client, "/ui/jobs?state=completed", requests),
            "console: the all tab": timed(client, "/ui/jobs?state=all", requests),
        }
        client.headers.update(auth)
        figures.update({
            "API: 100 active, soonest first": timed(client, "/v1/jobs?state=active&limit=100",
                                                    requests),
            "API: 100 active from 12 h ahead (a cursor)":
                timed(client, f"/v1/jobs?state=active&limit=100&cursor={middle}", requests),
            "API: 100 by name prefix (1 in 100 match)":
                timed(client, "/v1/jobs?name=team-07&limit=100", requests),
            "API: 100 by label (1 in 100 match)":
                timed(client, "/v1/jobs?label=team:t07&limit=100", requests),
            "API: 100 by label, paused (1 in 1,000 match)":
                timed(client, "/v1/jobs?label=team:t07&state=paused&limit=100", requests),
            "API: 100 by id": timed(client, "/v1/jobs?limit=100", requests),
        })
    path = jobs_store_path(conf)
    store_mib = sum(p.stat().st_size for p in path.parent.glob(f"{path.name}*")) / 2**20
    report("console-jobs", {
        **figures,
        "jobs": count, "counts per state (checked against those written)": counts,
        "produced s": round(produced_s, 1),
        "API ready from an empty store s": round(api_ready_s, 1),
        "API: jobs indexed a second (ready time)": round(count / api_ready_s),
        "API peak RSS MiB": api_peak_mib,
        "API jobs store on disk MiB": round(store_mib),
    }, {"jobs": count, "requests": requests})
    print("the workers are stopped and the jobs kept: remove this stack home when done",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--other-rows", type=int, default=0)
    parser.add_argument("--campaign", type=count_at_least(1), default=None,
                        help="time the campaign page during a send to this many recipients")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between loads")
    parser.add_argument("--workers", type=count_at_least(1), default=2)
    parser.add_argument("--jobs", type=count_at_least(1), default=None,
                        help="time the jobs list with this many jobs of one tenant")
    args = parser.parse_args()
    if args.jobs:
        jobs_at_size(args.jobs, args.requests)
        return
    if args.campaign:
        campaign_send(args.campaign, args.every, args.workers)
        return
    conf = settings.load()
    Stack(conf).up(with_app=True)
    name = f"bench{uuid.uuid4().hex[:8]}"
    key = tenants.create(conf.bootstrap, name,
                         partitions=conf.partitions, allowed_targets=["127.0.0.1"],
                         requests_per_s=10_000)
    auth = {"Authorization": f"Bearer {key}"}
    wait_for_key(conf.api_url, auth)
    job = httpx.post(f"{conf.api_url}/v1/jobs", headers=auth, timeout=30, json={
        "id": "history", "name": "10,000 slots", "paused": True,
        "schedule": {"cron": "* * * * *"},
        "target": {"type": "webhook", "url": "http://127.0.0.1:9/hook"}}).json()
    fill_ledger(conf.pg_dsn, name, f"{name}/history", args.slots, args.other_rows)
    with httpx.Client(base_url=conf.api_url, timeout=60) as client:
        sign_in(client, key)
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
