"""SIGKILL a worker mid-run: its partitions move, every slot still gets exactly one decision, and
the webhook receiver sees a fire id twice only for slots that were in flight at the kill."""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime, timedelta

from cli.demo import Receiver
from stack import processes
from streams.scheduling.reconciler import DEFAULT_LAG_MS
from streams.scheduling.schedule import fire_id
from tests.conftest import free_port
from tests.integration.helpers import ledger
from tests.waiting import wait_for


def test_sigkilled_worker_loses_no_slot(stack, api):
    stack.start_worker("worker-2")
    port = free_port()
    try:
        with Receiver(port, quiet=True) as receiver:
            start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
            end = start + timedelta(seconds=30)
            jobs = [api.post("/v1/jobs", json={
                "schedule": {"every_s": 1, "start": start.isoformat(), "end": end.isoformat()},
                "target": {"type": "webhook", "url": f"http://127.0.0.1:{port}/h"},
                "misfire": {"policy": "fire_all", "max_lateness_s": 600}}).json()["id"]
                for _ in range(12)]
            # mid-run: every job has run five of its slots
            wait_for(lambda: all(len({f for f in receiver.fires if f.startswith(f"{j}@")}) >= 5
                                 for j in jobs), timeout_s=60)
            pid = processes.alive(stack.pidfile("worker-2"))
            assert pid, "worker-2 is not running"
            killed_at = datetime.now(UTC)
            os.kill(pid, signal.SIGKILL)
            expected = {fire_id(j, int((start + timedelta(seconds=s)).timestamp() * 1000))
                        for j in jobs for s in range(31)}

            def decided() -> bool:
                rows = [r for j in jobs for r in ledger(stack, job_id=j)]
                return {r["fire_id"] for r in rows} >= expected and rows

            def missing() -> str:
                found = {r["fire_id"] for j in jobs for r in ledger(stack, job_id=j)}
                return f"slots without a decision: {sorted(expected - found)[:10]}"

            # a slot the survivor's stream skipped after the takeover is re-driven by the
            # reconciler once it has had no decision for its lag (seen in a CI run: one fired
            # record, fetched before faust's seek to the committed offsets, never reached the
            # executor), so the promise is "every slot decided within the reconciler's lag"
            rows = wait_for(decided, timeout_s=DEFAULT_LAG_MS / 1000 + 90, every_s=2,
                            explain=missing)
    finally:
        processes.stop(stack.pidfile("worker-2"))
    by_fire = {r["fire_id"]: r for r in rows}
    assert set(by_fire) == expected, "a slot has no decision"
    failed = [r for r in rows if r["outcome"] != "succeeded"]
    assert not failed, failed[:3]
    twice = {f for f in receiver.fires if receiver.fires.count(f) > 1}
    window = {fire_id(j, int((killed_at + timedelta(seconds=d)).replace(microsecond=0)
                             .timestamp() * 1000)) for j in jobs for d in (-2, -1, 0, 1)}
    assert twice <= window, f"duplicates outside the kill window: {sorted(twice - window)[:5]}"
