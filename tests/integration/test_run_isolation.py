"""Isolation under load, on the real stack (streams.execution.dispatch): a slow host holds back
only its own slots, a slot whose turn comes too late is expired with the reason, and a tenant
with one slot does not wait behind another tenant's many. Nothing here is timed: the tests look
at what was recorded and in which order the calls arrived.

The stack's workers run with a small per-host limit (``CRONSTREAM_RUNS_PER_HOST``, 8 in the test
session: tests/conftest.py); each test reads the value the workers actually use from their
/metrics, so the slot counts follow it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg

from cli.demo import Receiver
from tests.conftest import free_port, make_client
from tests.integration.helpers import HeldCalls, worker_metrics
from tests.waiting import wait_for

LEAD_S = 10  # the slots are due this far ahead: every job is created (and indexed) before then


def worker_gauge(stack, name: str) -> list[float]:
    """The gauge ``name`` of each running worker, from its /metrics."""
    values = list(worker_metrics(stack, name).values())
    assert values, "no worker is running"
    return values


def per_host_limits(stack) -> list[int]:
    return [int(v) for v in worker_gauge(stack, "cronstream_runs_per_host_limit")]


def run_backlog(stack) -> float:
    return sum(worker_gauge(stack, "cronstream_run_backlog_slots"))


def outcomes(stack, tenant: str) -> list[dict[str, Any]]:
    with psycopg.connect(stack.s.pg_dsn) as conn:
        rows = conn.execute("SELECT job_id, fire_id, decision, reason, outcome, error, attempts "
                            "FROM ledger WHERE tenant = %s", (tenant,)).fetchall()
    keys = ("job_id", "fire_id", "decision", "reason", "outcome", "error", "attempts")
    return [dict(zip(keys, row, strict=True)) for row in rows]


def settled(stack, tenant: str, count: int) -> list[dict[str, Any]]:
    """The tenant's ``count`` ledger rows once every one has its outcome."""
    return wait_for(lambda: (rows := outcomes(stack, tenant)) and len(rows) == count
                    and all(r["outcome"] != "pending" for r in rows) and rows, timeout_s=120)


def one_off(api: httpx.Client, at: datetime, port: int, **extra: Any) -> str:
    target = {"type": "webhook", "url": f"http://127.0.0.1:{port}/hook", **extra.pop("target", {})}
    response = api.post("/v1/jobs", json={"schedule": {"at": at.isoformat()}, "target": target,
                                          **extra})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_a_slow_host_holds_only_its_own_slots_and_their_late_turns_expire(stack, api):
    """The slow host gets at most the per-host limit of calls at once, each cut off at the
    job's timeout; the slots that waited for room past their ``max_lateness_s`` are recorded
    ``expired_stale`` with the run backlog as the reason; the fast host's slots, due in the same
    second, all succeed; nothing is lost and nothing runs twice."""
    limit = sum(per_host_limits(stack))
    extra = 4
    slow, fast = HeldCalls(hold_s=6.0), HeldCalls(hold_s=0.0)
    slow_port, fast_port = free_port(), free_port()
    with Receiver(slow_port, behave=slow.behave, quiet=True) as slow_rx, \
            Receiver(fast_port, behave=fast.behave, quiet=True) as fast_rx:
        at = datetime.now(UTC) + timedelta(seconds=LEAD_S)
        for _ in range(limit + extra):
            one_off(api, at, slow_port, target={"timeout_s": 3}, retry={"max_attempts": 1},
                    misfire={"policy": "fire_once", "max_lateness_s": 2})
        fast_jobs = {one_off(api, at, fast_port) for _ in range(4)}
        # while the slow host holds its calls, the workers' backlog gauge counts them and the
        # slots waiting for room
        wait_for(lambda: slow.peak >= limit, timeout_s=60)
        assert wait_for(lambda: run_backlog(stack) >= limit + extra, timeout_s=3, every_s=0.1)
        rows = settled(stack, api.tenant, limit + extra + 4)
    fast_rows = [r for r in rows if r["job_id"] in fast_jobs]
    slow_rows = [r for r in rows if r["job_id"] not in fast_jobs]
    assert [r["outcome"] for r in fast_rows] == ["succeeded"] * 4
    assert slow.peak <= limit, f"{slow.peak} calls held at once; the limit is {limit}"
    timed_out = [r for r in slow_rows if r["outcome"] == "failed"]
    expired = [r for r in slow_rows if r["decision"] == "expired_stale"]
    assert len(timed_out) + len(expired) == limit + extra, slow_rows
    assert all("timed out after 3" in (r["error"] or "") and r["attempts"] == 1 for r in timed_out)
    assert len(expired) >= extra
    assert all("run backlog" in r["reason"] and r["outcome"] == "not_run" for r in expired)
    calls = slow_rx.fires + fast_rx.fires
    assert len(calls) == len(set(calls)), "a slot was called twice"
    assert len(slow_rx.fires) == len(timed_out), "an expired slot was called"


def test_a_tenant_with_one_slot_waits_for_no_more_than_one_round_of_anothers(stack, api):
    """Tenant A's many slots and tenant B's one, due in the same second on one host that answers
    after half a second: the host's room is taken by A's first wave of ``limit`` calls, and when
    it ends the tenants take turns, so B's call is in the second wave at the latest, whatever
    the fired topic's order. (The calls of one wave arrive in any order, hence ``2 * limit``;
    without the turns B's lands anywhere among A's ten waves.)"""
    limit = sum(per_host_limits(stack))
    slow = HeldCalls(hold_s=0.5)
    port = free_port()
    with Receiver(port, behave=slow.behave, quiet=True) as rx, make_client(stack) as other:
        at = datetime.now(UTC) + timedelta(seconds=LEAD_S)
        for _ in range(10 * limit):
            one_off(api, at, port)
        lone = one_off(other, at, port)
        rows = settled(stack, api.tenant, 10 * limit)
        lone_row = settled(stack, other.tenant, 1)[0]
    assert {r["outcome"] for r in rows} == {"succeeded"} and lone_row["outcome"] == "succeeded"
    position = rx.fires.index(lone_row["fire_id"])
    assert position < 2 * limit, (f"tenant B's slot {lone} arrived {position + 1}th of "
                                  f"{len(rx.fires)} calls; the host's limit is {limit}")
