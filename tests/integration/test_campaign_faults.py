"""The campaign invariant under faults: every one of 100k recipients accounted for exactly once
and no address mailed twice, through a SIGKILLed worker and an SES throttling spell; and a
malformed 1M-row upload reported line by line."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import httpx
import pytest

from stack import processes
from tests.chaos.checker import Stops, campaign_violations, walker_stops
from tests.integration.helpers import ses_faults, sigkill, worker_metrics, worker_trouble
from tests.integration.test_campaigns import campaign_body, outcomes, upload
from tests.waiting import wait_for

N = 100_000


def csv_rows(n: int, tag: str) -> str:
    return "email,name\n" + "".join(f"{tag}{i}@example.net,N{i}\n" for i in range(n))


def start(api, tag: str, **extra) -> tuple[str, str, str]:
    tag = f"{tag}{uuid.uuid4().hex[:6]}-"  # the SES log outlives test runs: name this run's mail
    subject = f"fault run {tag}"
    # a deadline far enough out that a slow machine cannot expire recipients: not what this tests
    created = api.post("/v1/campaigns", json={**campaign_body(seconds=1, **extra),
                                               "subject": subject, "send_deadline_s": 7200}).json()
    assert upload(api, created["id"], csv_rows(N, tag))["recipients"] == N
    assert api.post(f"/v1/campaigns/{created['id']}/schedule").status_code == 200
    return created["id"], subject, tag


def settle(stack, campaign_id: str) -> dict[str, str]:
    """Every recipient's outcome; on a timeout, the counts so far and the workers' trouble."""
    return wait_for(lambda: (o := outcomes(stack, campaign_id)) and len(o) == N and o,
                    timeout_s=900, every_s=5,
                    explain=lambda: f"outcomes so far: {Counter(outcomes(stack, campaign_id).values())}"
                                    f"\n{worker_trouble(stack)}")


def sending(stack, worker: int) -> bool:
    """Whether the worker recorded campaign outcomes within the last 0.2 s: chunks in flight."""
    def sent() -> float:
        return worker_metrics(stack, "cronstream_campaign_sends_total", [worker]).get(worker, 0.0)

    before = sent()
    time.sleep(0.2)
    return sent() > before


def judged(stack, campaign_id: str, subject: str, tag: str, stops: Stops | None = None
           ) -> list[str]:
    """The fault suite's checker on the campaign (``tests.chaos.checker``): every recipient one
    terminal outcome, none mailed twice (the SES log), ``unknown`` only for a request out at a
    stop, Postgres equal to Kafka; the sink given time to catch up first."""
    emails = [f"{tag}{i}@example.net" for i in range(N)]
    if stops is not None and stops.kill is not None:
        stops = Stops(stops.kill, stops.others + walker_stops(stack, campaign_id, stops.kill))
    deadline = time.monotonic() + 120
    while (problems := campaign_violations(stack, campaign_id, subject, emails, stops=stops)) \
            and time.monotonic() < deadline:
        time.sleep(5)
    return problems


@pytest.mark.timeout(1200)  # settle() reports first, with the workers' logs
def test_worker_sigkilled_mid_fanout(stack, api):
    stack.start_worker("worker-2")
    try:
        # fast enough that a kill finds chunks between SES's answer and their done mark (about
        # 30 ms each): at 4,000/s one run in three found none and let no-chunk-intent survive
        campaign_id, subject, tag = start(api, "kill", max_rate_per_s=10_000)
        wait_for(lambda: len(outcomes(stack, campaign_id)) > N // 5, timeout_s=300, every_s=1)
        # killed as it sends: without an intent, only a chunk it had answered and not yet
        # marked done is sent twice, and a kill between its walks found none (the mutation
        # no-chunk-intent survived one run of two on 2026-11-30)
        wait_for(lambda: sending(stack, 2), timeout_s=120, every_s=0.1)
        killed = sigkill(stack, "worker-2")
        time.sleep(3)
        stack.start_worker("worker-2")
        done = settle(stack, campaign_id)
    finally:
        processes.stop(stack.pidfile("worker-2"))
    problems = judged(stack, campaign_id, subject, tag, Stops(killed))
    assert problems == [], "\n".join(problems)
    counts = Counter(done.values())
    assert counts["unknown"] <= 50 * 64, counts  # at most the chunks in flight at the kill


@pytest.mark.timeout(1200)
def test_ses_throttling_spell_drops_nothing(stack, api):
    with ses_faults(stack, throttle_ratio=0.3, seconds=20):
        campaign_id, subject, tag = start(api, "throttle")
        done = settle(stack, campaign_id)
    assert Counter(done.values()) == {"sent": N}
    problems = judged(stack, campaign_id, subject, tag)
    assert problems == [], "\n".join(problems)
    calls = httpx.get(f"{stack.s.ses_endpoint}/_local/calls", params={"campaign": campaign_id},
                      timeout=60).json()
    assert any(c["outcome"] == "throttled" for c in calls), "this campaign was never throttled"


def test_malformed_million_row_csv_is_reported_line_by_line(stack, api):
    created = api.post("/v1/campaigns", json=campaign_body(seconds=3600)).json()
    bad_lines = set(range(1000, 1_000_001, 10_000))

    def body():
        yield b"email,name\n"
        batch = []
        for line in range(2, 1_000_002):
            if line in bad_lines:
                batch.append("this is not an address,X\n" if line % 20_000 else "a@b.c,\"x\n")
            else:
                batch.append(f"m{line}@example.com,M\n")
            if len(batch) == 20_000:
                yield "".join(batch).encode()
                batch = []
        yield "".join(batch).encode()

    response = api.put(f"/v1/campaigns/{created['id']}/recipients", content=body(),
                       headers={"content-type": "text/csv"}, timeout=900)
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["bad_rows"] == len(bad_lines)
    assert {b["line"] for b in report["bad_rows_listed"]} == bad_lines
    assert report["recipients"] == 1_000_000 - len(bad_lines)
    assert api.get(f"/v1/campaigns/{created['id']}").json()["status"] == "ready"
