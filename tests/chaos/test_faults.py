"""Fault injection on the real local stack, each scenario judged by ``checker``.

Short mode (the default, run by ``./dev test``) uses campaigns of ``N`` recipients and outages of
``OUTAGE_S``; ``CRONSTREAM_SOAK=1`` multiplies both (``./dev test tests/chaos`` for a soak run).
Every scenario ends with the checker's list of violations, which must be empty.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from cli.demo import Receiver
from stack import processes
from streams.topology import APP_ID, RECIPIENT_OUTCOMES, SEND_CHUNKS_TABLE
from tests.chaos.checker import (
    TALLY,
    campaign_violations,
    every_second,
    history,
    kafka_ledger,
    pg_campaign,
    slot_violations,
    unknown_verdict,
)
from tests.conftest import free_port
from tests.integration.helpers import ses_faults, worker_trouble
from tests.integration.test_campaigns import campaign_body, upload
from tests.waiting import wait_for

SOAK = int(os.environ.get("CRONSTREAM_SOAK", "0") or 0)
N = 20_000 * (10 if SOAK else 1)
OUTAGE_S = 20 * (3 if SOAK else 1)

pytestmark = pytest.mark.timeout(1800 if SOAK else 900)


def start_campaign(api, tag: str, n: int = N, **extra) -> tuple[str, str, list[str]]:
    """A campaign of ``n`` fresh addresses sending from now; returns (id, subject, emails)."""
    tag = f"{tag}-{uuid.uuid4().hex[:6]}"
    emails = [f"{tag}-{i}@chaos.example" for i in range(n)]
    body = {**campaign_body(seconds=1, **extra), "subject": f"chaos {tag}", "send_deadline_s": 7200}
    created = api.post("/v1/campaigns", json=body).json()
    assert upload(api, created["id"], "email\n" + "\n".join(emails) + "\n")["recipients"] == n
    assert api.post(f"/v1/campaigns/{created['id']}/schedule").status_code == 200
    return created["id"], body["subject"], emails


def progress(stack, campaign_id: str) -> int:
    return len(pg_campaign(stack, campaign_id))


def finish(stack, campaign_id: str, subject: str, emails: list[str]) -> None:
    """Wait for every outcome, then run the checker; the workers' trouble explains a failure."""
    wait_for(lambda: progress(stack, campaign_id) >= len(emails), timeout_s=600, every_s=3,
             explain=lambda: f"{progress(stack, campaign_id)}/{len(emails)} outcomes\n"
                             f"{worker_trouble(stack)}")
    # the sink is eventually consistent: give Postgres time to equal Kafka before judging
    deadline = time.monotonic() + 120
    while (problems := campaign_violations(stack, campaign_id, subject, emails)) and \
            time.monotonic() < deadline:
        time.sleep(5)
    TALLY.events += len(emails)
    TALLY.violations += len(problems)
    assert problems == [], "\n".join(problems)


def at_fraction(stack, campaign_id: str, n: int, fraction: float) -> None:
    wait_for(lambda: progress(stack, campaign_id) >= n * fraction, timeout_s=300, every_s=1)


def with_workers(stack, names: list[str], scenario: Callable[[], None]) -> None:
    for name in names:
        stack.start_worker(name)
    try:
        scenario()
    finally:
        for name in names:
            pid = processes.alive(stack.pidfile(name))
            if pid:
                os.kill(pid, signal.SIGCONT)  # a stopped process cannot handle SIGTERM
            processes.stop(stack.pidfile(name))


def test_worker_sigkilled_mid_campaign_and_restarted(stack, api):
    """SIGKILL one of two workers mid-fan-out, restart it: intents in flight resolve ``unknown``,
    every other recipient is sent exactly once."""
    def scenario() -> None:
        campaign_id, subject, emails = start_campaign(api, "sigkill", max_rate_per_s=1500)
        at_fraction(stack, campaign_id, N, 0.2)
        os.kill(processes.alive(stack.pidfile("worker-2")), signal.SIGKILL)
        TALLY.faults += 1
        time.sleep(3)
        stack.start_worker("worker-2")
        finish(stack, campaign_id, subject, emails)
    with_workers(stack, ["worker-2"], scenario)


def test_zombie_worker_paused_past_its_session_sends_nothing_twice(stack, api):
    """SIGSTOP a worker mid-campaign for longer than its session timeout, then SIGCONT it: its
    partitions have moved, and its walkers must not send a chunk the new owner sends."""
    def scenario() -> None:
        campaign_id, subject, emails = start_campaign(api, "zombie", max_rate_per_s=1500)
        at_fraction(stack, campaign_id, N, 0.2)
        pid = processes.alive(stack.pidfile("worker-2"))
        os.kill(pid, signal.SIGSTOP)
        TALLY.faults += 1
        time.sleep(OUTAGE_S)  # session timeout is 10 s: the group moves on without it
        os.kill(pid, signal.SIGCONT)
        finish(stack, campaign_id, subject, emails)
    with_workers(stack, ["worker-2"], scenario)


def test_workers_join_and_leave_mid_campaign(stack, api):
    def scenario() -> None:
        campaign_id, subject, emails = start_campaign(api, "rebalance", max_rate_per_s=1500)
        at_fraction(stack, campaign_id, N, 0.2)
        stack.start_worker("worker-3")
        at_fraction(stack, campaign_id, N, 0.5)
        processes.stop(stack.pidfile("worker-2"))
        TALLY.faults += 2
        finish(stack, campaign_id, subject, emails)
    with_workers(stack, ["worker-2"], lambda: with_workers(stack, ["worker-3"], scenario))


def test_kafka_broker_restarted_mid_campaign(stack, api):
    campaign_id, subject, emails = start_campaign(api, "broker", max_rate_per_s=1500)
    at_fraction(stack, campaign_id, N, 0.2)
    assert processes.stop(stack.pidfile("kafka"), timeout_s=60)
    TALLY.faults += 1
    time.sleep(5)
    stack.start_kafka()
    finish(stack, campaign_id, subject, emails)
    # a campaign created after the restart is seen by the workers too (their topic views once
    # stopped reading after a broker restart: the campaign "not found", its tick dead-lettered)
    finish(stack, *start_campaign(api, "after-restart", n=500))


def test_connect_and_postgres_down_the_sink_catches_up(stack, api):
    campaign_id, subject, emails = start_campaign(api, "sink", max_rate_per_s=1500)
    at_fraction(stack, campaign_id, N, 0.2)
    processes.stop(stack.pidfile("connect"), timeout_s=60)
    stack.stop_postgres()
    TALLY.faults += 2
    time.sleep(OUTAGE_S)
    stack.start_postgres()
    stack.start_connect()
    stack.register_sink()
    finish(stack, campaign_id, subject, emails)


def test_ses_throttling_storm_and_timeouts_after_accepting(stack, api):
    stats = f"{stack.s.ses_endpoint}/_local/stats"
    before = httpx.get(stats).json()
    # a hang of 12 s outlasts the client's 10 s read timeout: the mail left, the answer did not
    with ses_faults(stack, throttle_ratio=0.9, timeout_after_accept_ratio=0.05, timeout_s=12,
                    seconds=OUTAGE_S + 40):
        campaign_id, subject, emails = start_campaign(api, "storm")
        TALLY.faults += 1
        finish(stack, campaign_id, subject, emails)
    after = httpx.get(stats).json()
    assert after["throttled"] - before["throttled"] > 100, "the storm did not happen"
    outcomes = pg_campaign(stack, campaign_id)
    assert set(outcomes.values()) <= {"sent", "unknown"}  # throttled: retried, never dropped
    if after["timeouts"] > before["timeouts"]:
        assert "unknown" in outcomes.values(), "a send that timed out after leaving is unknown"


def revocations(stack, campaign_id: str, since_ms: int) -> list[int]:
    """When the workers' logs say a walker of the campaign stopped on a revocation (a rebalance
    cancels a survivor's walkers too, and a request in flight then is as unknown as at a kill)."""
    found = []
    for log in stack.s.home.joinpath("logs").glob("worker-*.log"):
        for line in log.open(errors="replace"):
            if campaign_id in line and "revoked: walker stopped" in line:
                at = datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").astimezone(UTC)
                if (ms := int(at.timestamp() * 1000)) >= since_ms:
                    found.append(ms)
    return found


def test_a_kill_while_chunks_wait_out_throttling_leaves_only_requests_in_flight_unknown(stack, api):
    """Issue 30, narrow ``unknown``: SES throttles 80 % of calls, and one of two workers is
    SIGKILLed mid-campaign while many chunks wait to retry. A chunk SES refused is recorded
    ``refused`` before its backoff, so the next owner sends it, exactly once; ``unknown`` stays
    within the chunks that had a request out at a stop, or an intent and no request yet
    (``checker.unknown_verdict``)."""
    calls_url = f"{stack.s.ses_endpoint}/_local/calls"

    def scenario() -> None:
        with ses_faults(stack, throttle_ratio=0.8, seconds=900):
            campaign_id, subject, emails = start_campaign(api, "refused", n=N // 2,
                                                          max_rate_per_s=1500)
            at_fraction(stack, campaign_id, N // 2, 0.2)
            killed_ms = time.time_ns() // 1_000_000
            os.kill(processes.alive(stack.pidfile("worker-2")), signal.SIGKILL)
            TALLY.faults += 1
            finish(stack, campaign_id, subject, emails)
        calls = httpx.get(calls_url, params={"campaign": campaign_id}, timeout=60).json()
        chunks = kafka_ledger(stack.s.bootstrap, f"{campaign_id}:", RECIPIENT_OUTCOMES)
        states = history(stack.s.bootstrap, SEND_CHUNKS_TABLE.changelog(APP_ID), f"{campaign_id}:")
        verdict = unknown_verdict(chunks, states, calls,
                                  [killed_ms, *revocations(stack, campaign_id, killed_ms)])
        figures = (f"{len(chunks)} chunks, {len(calls)} SES calls; at the kill "
                   f"{len(verdict.waiting)} were waiting to retry a refusal; unknown: "
                   f"{len(verdict.unknown)} chunks, {len(verdict.request_out)} with a request "
                   f"out at a stop, {len(verdict.intent_only)} with an intent and no request")
        TALLY.figures.append(f"throttled kill: {figures}")
        TALLY.violations += len(verdict.violations)
        assert verdict.violations == [], f"{figures}\n" + "\n".join(verdict.violations[:20])
        assert verdict.waiting, f"no chunk was waiting to retry at the kill: {figures}"
    with_workers(stack, ["worker-2"], scenario)


def test_workers_down_then_back_apply_misfire_policies(stack, api):
    """A long outage: on restart, slots within their lateness are caught up per policy (paced),
    older ones expire, and every slot has exactly one decision."""
    with Receiver(port := free_port(), quiet=True) as receiver:
        start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
        end = start + timedelta(seconds=OUTAGE_S + 20)
        jobs = {}
        for policy, lateness in (("skip", 600), ("fire_once", 600), ("fire_all", 600),
                                 ("fire_all", 8)):
            jobs[(policy, lateness)] = api.post("/v1/jobs", json={
                "schedule": {"every_s": 1, "start": start.isoformat(), "end": end.isoformat()},
                "target": {"type": "webhook", "url": f"http://127.0.0.1:{port}/h"},
                "misfire": {"policy": policy, "max_lateness_s": lateness}}).json()["id"]
        time.sleep((start - datetime.now(UTC)).total_seconds() + 5)
        processes.stop(stack.pidfile("worker-1"))
        TALLY.faults += 1
        down_at = datetime.now(UTC)
        time.sleep(OUTAGE_S)
        stack.start_worker("worker-1")
        slots = every_second(int(start.timestamp() * 1000), int(end.timestamp() * 1000))
        wait_for(lambda: all(len(_decisions(stack, j)) >= len(slots) for j in jobs.values()),
                 timeout_s=180, every_s=2)
    problems = [p for j in jobs.values() for p in slot_violations(stack, j, slots, receiver.fires)]
    TALLY.events += len(slots) * len(jobs)
    TALLY.violations += len(problems)
    assert problems == [], problems
    outage = {s for s in slots if down_at.timestamp() * 1000 + 2000 < s
              < (down_at.timestamp() + OUTAGE_S) * 1000 - 6000}
    decided = {key: _decisions(stack, j) for key, j in jobs.items()}

    def during(key: tuple[str, int]) -> list[str]:
        return [d for s, d in decided[key].items() if s in outage]

    assert set(during(("skip", 600))) == {"skipped_policy"}
    assert during(("fire_once", 600)).count("missed_caught_up") <= 1
    assert set(during(("fire_all", 600))) == {"missed_caught_up"}
    assert set(during(("fire_all", 8))) == {"expired_stale"}


def _decisions(stack, job_id: str) -> dict[int, str]:
    import psycopg

    with psycopg.connect(stack.s.pg_dsn) as conn:
        rows = conn.execute("SELECT nominal_time, decision FROM ledger WHERE job_id = %s",
                            (job_id,)).fetchall()
    return {int(t.replace(tzinfo=UTC).timestamp() * 1000): d for t, d in rows}


def test_deadline_passing_during_an_outage_expires_the_rest_with_reason(stack, api):
    """Workers down across a campaign's stale cutoff: on restart nothing more is sent; every
    recipient not sent before the outage is ``expired_stale`` with the reason."""
    tag = f"outage-{uuid.uuid4().hex[:6]}"
    emails = [f"{tag}-{i}@chaos.example" for i in range(3000)]
    body = {**campaign_body(seconds=1, send_deadline_s=60, max_rate_per_s=40),
            "subject": f"chaos {tag}"}
    created = api.post("/v1/campaigns", json=body).json()
    upload(api, created["id"], "email\n" + "\n".join(emails) + "\n")
    api.post(f"/v1/campaigns/{created['id']}/schedule")
    at_fraction(stack, created["id"], 3000, 0.05)
    processes.stop(stack.pidfile("worker-1"))
    TALLY.faults += 1
    time.sleep(65)  # past send_at + 60 s
    stack.start_worker("worker-1")
    finish(stack, created["id"], body["subject"], emails)
    outcomes = pg_campaign(stack, created["id"])
    sent = [e for e, o in outcomes.items() if o == "sent"]
    assert 100 <= len(sent) < 3000 and set(outcomes.values()) <= {"sent", "expired_stale", "unknown"}
    import psycopg

    with psycopg.connect(stack.s.pg_dsn) as conn:
        reasons = {r[0] for r in conn.execute(
            "SELECT DISTINCT reason FROM ledger WHERE campaign_id = %s AND outcome = "
            "'expired_stale'", (created["id"],)).fetchall()}
    assert reasons == {"not sent by the deadline send_at + 60s"}
