"""SIGKILL a worker mid-run: its partitions move, every slot still gets exactly one decision and
runs (judged by ``tests.chaos.checker`` against the webhook receiver's log), and the receiver sees
a fire id twice only if a call of it was out when the worker was killed."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from cli.demo import Receiver
from stack import processes
from streams.scheduling.reconciler import DEFAULT_LAG_MS
from streams.scheduling.schedule import fire_id
from streams.topology import partition_for
from tests.chaos.checker import out_at, slots_violations
from tests.chaos.workloads import settled_owners
from tests.conftest import cluster_partitions, free_port
from tests.integration.helpers import executor_caught_up, ledger, sigkill
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
            # the worker killed held some of the jobs' partitions: its slots must move
            _, owners = wait_for(lambda: settled_owners(stack.s.bootstrap, 2), timeout_s=60)
            count = cluster_partitions()
            victims = [j for j in jobs if partition_for(j, count) in owners.get("worker-2", [])]
            assert victims, f"worker-2 holds none of the jobs' partitions: {owners}"
            killed_ms = sigkill(stack, "worker-2")
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
            wait_for(decided, timeout_s=DEFAULT_LAG_MS / 1000 + 90, every_s=2, explain=missing)
            wait_for(executor_caught_up(stack, jobs))
    finally:
        processes.stop(stack.pidfile("worker-2"))
    calls: dict[str, list[int]] = {}
    for fid, at in zip(receiver.fires, receiver.arrived_ms, strict=True):
        calls.setdefault(fid, []).append(at)
    # a slot run twice only if a call of it was out at the kill (``checker.out_at``): the killed
    # worker's run, whose outcome it had not recorded or committed, is run again by the survivor
    deadline = time.monotonic() + 60  # the sink is eventually consistent
    while (problems := slots_violations(stack, expected, receiver.fires,
                                        may_repeat=lambda f: out_at(calls[f], killed_ms))) \
            and time.monotonic() < deadline:
        time.sleep(2)
    assert problems == [], problems
