"""Fan-out: one campaign of N recipients, from the scheduler's tick to SES-accepted.

    .venv/bin/python -m bench.fanout [--recipients 1000000] [--workers 2]

Runs on the real local stack: uploads N recipients through the API (streamed CSV), schedules the
campaign, and reads the local SES server's own log to time every accepted recipient. Figures:
recipients/s sustained (first to last accepted), p50/p99 time-to-send after the fire, duplicates
(must be 0), workers' peak RSS, the SES server's own ceiling measured first with the same
boto3 bulk calls, and where the box's cores went during the campaign (CPU of each component's
process tree, read from /proc before and after): the SES server shares the two cores with the
system under test, so its share says how much of the box the test double itself took.
Target: >= 14,000 recipients/s.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    component_pids,
    count_at_least,
    cpu_seconds,
    cpu_share,
    jit_cpu_seconds,
    percentile,
    report,
    rss_peak_mib,
)
from cli.demo import wait_for_key
from stack import processes
from stack.local import Stack
from streams.adapters import ses, tenants
from streams.runtime import settings

QUIET_S = 60.0  # no mail accepted for this long after the first: the campaign is over


def ses_ceiling(conf: settings.Settings, seconds: float = 5.0, threads: int = 8) -> float:
    """Recipients/s the local SES server accepts from boto3 bulk calls of 50, all cores busy."""
    client = ses.client(conf.ses_endpoint_url, conf.aws_region)
    entries = [ses.BulkEntry(f"ceiling{i}@example.net", {}, "{}") for i in range(50)]
    stop = time.monotonic() + seconds

    def hammer() -> int:
        sent = 0
        while time.monotonic() < stop:
            call, _ = ses.send_bulk(client, sender="bench@example.com", subject="ceiling",
                                    text="x", html=None, entries=entries, configuration_set=None)
            sent += 50 if call.outcome is ses.Outcome.SENT else 0
        return sent

    with ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(lambda _: hammer(), range(threads)))
    return total / seconds


def wait_for_mail(log: Path, start: int, expected: int,
                  clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> int:
    """Wait until the SES log has ``expected`` lines past ``start``, or has not grown for
    ``QUIET_S`` once something arrived (the rest have other outcomes: see the counts); returns
    the lines seen. Counts newlines in the new bytes and parses nothing: reading the log line by
    line while the campaign ran took 8 % of the two cores the system under test runs on.
    ``clock`` and ``sleep`` are for tests, which pass a fake pair."""
    lines, position, quiet_since = 0, start, clock()
    deadline = quiet_since + 3600
    while lines < expected and clock() < deadline:
        size = log.stat().st_size if log.exists() else 0
        if size > position:
            with open(log, "rb") as f:
                f.seek(position)
                chunk = f.read(size - position)
            lines += chunk.count(b"\n")  # a line being written counts when its newline comes
            position = size
            quiet_since = clock()
        elif lines and clock() - quiet_since > QUIET_S:
            break
        sleep(1.0)
    return lines


def csv_body(n: int, run: str) -> Iterator[bytes]:
    yield b"email,name\n"
    batch = []
    for i in range(n):
        batch.append(f"r{i}.{run}@bench.example,R{i}\n")
        if len(batch) == 10_000:
            yield "".join(batch).encode()
            batch = []
    if batch:
        yield "".join(batch).encode()


def upload_campaign(api: httpx.Client, run: str, recipients: int
                    ) -> tuple[dict[str, Any], dict[str, Any], float]:
    """A campaign of ``recipients`` synthetic addresses, named and subjected ``bench {run}``,
    created and uploaded (streamed CSV) through the public API but not scheduled: the campaign,
    the upload's report and the upload's seconds. ``send_at`` is a second away, so it has passed
    when the caller schedules it and the schedule fires at once. Shared with ``bench.console``,
    whose campaign page is timed during the same kind of send."""
    subject = f"bench {run}"
    created = api.post("/v1/campaigns", json={
        "name": subject, "from": "bench@example.com", "subject": subject, "text": "Hi {{name}}",
        "send_at": (datetime.now(UTC) + timedelta(seconds=1)).isoformat(),
        "send_deadline_s": 7200}).json()
    started = time.monotonic()
    uploaded = api.put(f"/v1/campaigns/{created['id']}/recipients",
                       content=csv_body(recipients, run),
                       headers={"content-type": "text/csv"}).json()
    upload_s = time.monotonic() - started
    print(f"uploaded {uploaded['recipients']:,} recipients in {upload_s:.1f}s", flush=True)
    return created, uploaded, upload_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipients", type=count_at_least(1), default=1_000_000)
    parser.add_argument("--workers", type=count_at_least(1), default=2)
    args = parser.parse_args()
    conf = settings.load()
    stack = Stack(conf)
    stack.up(with_app=True, workers=args.workers)
    settings.export(stack.app_env(), override=True)  # this process talks to the stack's SES
    ceiling = ses_ceiling(conf)
    print(f"local SES server ceiling: {ceiling:,.0f} recipients/s", flush=True)

    key = tenants.create(conf.bootstrap, f"bench{uuid.uuid4().hex[:6]}",
                         partitions=conf.partitions, senders=["example.com"])
    auth = {"Authorization": f"Bearer {key}"}
    wait_for_key(conf.api_url, auth)
    api = httpx.Client(base_url=conf.api_url, headers=auth, timeout=600)
    run = uuid.uuid4().hex[:8]
    subject = f"bench {run}"  # what upload_campaign names it: the SES log's mail of this run
    created, uploaded, upload_s = upload_campaign(api, run, args.recipients)
    # send_at has passed by now, so the schedule fires at once: the fire is the schedule call
    workers = [f"worker-{i}" for i in range(1, args.workers + 1)]
    roots = component_pids(stack, workers)
    jit_before = jit_cpu_seconds(roots)
    cpu_before, campaign_started = cpu_seconds(roots), time.monotonic()
    fire_ms = int(time.time() * 1000)
    assert api.post(f"/v1/campaigns/{created['id']}/schedule").status_code == 200
    log_start = stack.ses_log.stat().st_size if stack.ses_log.exists() else 0
    wait_for_mail(stack.ses_log, log_start, uploaded["recipients"])
    cpu_after, campaign_s = cpu_seconds(roots), time.monotonic() - campaign_started
    jit_after = jit_cpu_seconds(roots)
    accepted: list[int] = []
    per_address: Counter[str] = Counter()
    with open(stack.ses_log, "rb") as log:
        log.seek(log_start)
        for line in log:  # parsed once the campaign is over: the box is not shared with us then
            mail = json.loads(line)
            if mail["subject"] == subject:
                accepted.append(mail["at_ms"])
                per_address[mail["to"]] += 1
    pids = [processes.alive(stack.pidfile(name)) for name in workers]
    used = {name: cpu_after[name] - cpu_before[name] for name in roots}
    span_s = (max(accepted) - min(accepted)) / 1000 if accepted else float("nan")
    after_fire = [at - fire_ms for at in accepted]
    report("fanout", {
        "recipients": uploaded["recipients"],
        "accepted by SES": len(accepted),
        "recipients/s (first to last accepted)": round(len(accepted) / max(span_s, 0.001)),
        "time-to-send after fire p50 s": round(percentile(after_fire, 50) / 1000, 1),
        "time-to-send after fire p99 s": round(percentile(after_fire, 99) / 1000, 1),
        "duplicates": sum(c - 1 for c in per_address.values() if c > 1),
        "upload recipients/s": round(uploaded["recipients"] / upload_s),
        "local SES server ceiling recipients/s": round(ceiling),
        "worker peak RSS MiB": [rss_peak_mib(p) for p in pids if p],
        "cores used during the campaign": cpu_share(cpu_before, cpu_after, campaign_s),
        "of which the JVMs' JIT compilers": cpu_share(jit_before, jit_after, campaign_s),
        "CPU µs per recipient (whole box)": round(sum(used.values()) / max(len(accepted), 1) * 1e6),
        "CPU µs per recipient (cronstream: no SES server, no benchmark)": round(sum(
            cpu for name, cpu in used.items() if name not in ("ses", "benchmark"))
            / max(len(accepted), 1) * 1e6),
        "campaign status": api.get(f"/v1/campaigns/{created['id']}").json()["counts"],
    }, {"workers": args.workers, "recipients": args.recipients})


if __name__ == "__main__":
    main()
