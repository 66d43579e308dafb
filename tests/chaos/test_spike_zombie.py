"""A webhook spike with a zombie executor (issue 39's guard, issue 48): many one-off webhook jobs
due in the same second, drained by two workers; mid-drain one of them is SIGSTOPped past its
session timeout, the group moves its partitions to the other, and it is SIGCONTed.

Judged from the webhook receiver's log (``bench.receiver``: its own process, the arrival time of
every call) and the ledger topic's whole history (``checker.slots_violations``):

- every slot has exactly one decision, and ran (``fired``, one-offs with 600 s of lateness);
- a fire id was called once, or twice only if its first call arrived before the zombie was
  stopped (``READ_LATE_MS`` after the SIGSTOP at most, a request it had written being read):
  a run the zombie had in flight, whose outcome it never recorded in time, is run again by the
  new owner (at-least-once webhooks, with the fire id for the receiver to dedupe). A repeat whose
  first call came later is a run started twice after the fault: a violation;
- the zombie demonstrably acted: before the stop it held partitions of ``cronstream.fired``
  whose slots were not drained yet (the new owner's calls of them after the stop show it), and
  once woken it let go of the runs it still held (its log: the waiting slots of each revoked
  partition left to the new owner, or fired records fenced off).

Short mode: 10,000 jobs (about a minute of draining on 2 cores at the suite's 8 calls per host
and worker); soak mode ten times that.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import psycopg

from bench.receiver import Receiver as SpikeReceiver
from stack import processes
from streams.scheduling.schedule import fire_id
from streams.topology import partition_for
from tests.chaos.checker import READ_LATE_MS, TALLY, slots_violations
from tests.chaos.test_faults import SOAK, with_workers
from tests.chaos.workloads import import_spike, settled_owners, sleep_until
from tests.integration.helpers import executor_caught_up, worker_trouble
from tests.waiting import wait_for

SPIKE_JOBS = 10_000 * (10 if SOAK else 1)
STOP_AT = 0.25  # the zombie is stopped once this share of the spike has been called
# the zombie's log, once woken: runs it let go of (streams.execution.executor)
LET_GO = re.compile(r"partition (\d+) revoked: (\d+) waiting slots left to its new owner")
FENCED = re.compile(r"fenced \S+ of job")


def decided(stack, tenant: str) -> int:
    with psycopg.connect(stack.s.pg_dsn) as conn:
        return conn.execute("SELECT count(*) FROM ledger WHERE kind = 'job' AND tenant = %s",
                            (tenant,)).fetchone()[0]


def log_since(stack, worker: str, since_ms: int) -> list[str]:
    """The worker's log lines stamped at or after ``since_ms``."""
    lines = []
    for line in stack.log(worker).open(errors="replace"):
        try:
            at = datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").astimezone(UTC)
        except ValueError:
            continue  # a continuation line (a traceback, a table)
        if at.timestamp() * 1000 >= since_ms:
            lines.append(line)
    return lines


def test_a_webhook_spike_with_a_zombie_executor_runs_every_slot_once(stack, api):
    def scenario() -> None:
        with SpikeReceiver() as receiver:
            began = datetime.now(UTC)
            spike = began.replace(microsecond=0) + timedelta(seconds=40 + SPIKE_JOBS / 500)
            jobs = import_spike(api, receiver.url, spike, SPIKE_JOBS)
            assert datetime.now(UTC) < spike - timedelta(seconds=10), \
                "the import left the workers no time to index the jobs"
            _, owners = wait_for(lambda: settled_owners(stack.s.bootstrap, 2), timeout_s=120)
            zombie_parts = set(owners.get("worker-2", []))
            zombie_jobs = {j for j in jobs if partition_for(j) in zombie_parts}
            assert zombie_jobs, f"worker-2 holds no partition with a slot of the spike: {owners}"
            spike_ms = int(spike.timestamp() * 1000)
            expected = {fire_id(j, spike_ms) for j in jobs}
            sleep_until(spike)
            wait_for(lambda: receiver.count()[0] >= STOP_AT * SPIKE_JOBS, timeout_s=300,
                     every_s=0.2, explain=lambda: worker_trouble(stack))
            pid = processes.alive(stack.pidfile("worker-2"))
            os.kill(pid, signal.SIGSTOP)
            stopped_ms = time.time_ns() // 1_000_000
            TALLY.faults += 1
            # the group moves on without it (10 s of session): worker-1 holds every partition
            wait_for(lambda: settled_owners(stack.s.bootstrap, 1), timeout_s=120, every_s=1)
            os.kill(pid, signal.SIGCONT)
            woken_ms = time.time_ns() // 1_000_000
            wait_for(lambda: decided(stack, api.tenant) >= len(jobs), timeout_s=900, every_s=5,
                     explain=lambda: f"{decided(stack, api.tenant)} of {len(jobs)} decided\n"
                                     f"{worker_trouble(stack)}")
            wait_for(executor_caught_up(stack, jobs), timeout_s=300)
            arrivals = receiver.dump().pairs
        first: dict[str, int] = {}
        for fid, ns in arrivals:
            first.setdefault(fid, ns // 1_000_000)

        def may_repeat(fid: str) -> bool:
            """Its first call was out when the zombie was stopped: the zombie's run in flight."""
            return first[fid] <= stopped_ms + READ_LATE_MS

        deadline = time.monotonic() + 120  # the sink is eventually consistent
        calls = [f for f, _ in arrivals]
        while (problems := slots_violations(stack, expected, calls, may_repeat=may_repeat)) \
                and time.monotonic() < deadline:
            time.sleep(5)
        taken_over = sum(1 for f, at in first.items() if f.split("@")[0] in zombie_jobs
                         and at > stopped_ms + READ_LATE_MS)
        woken = log_since(stack, "worker-2", woken_ms)
        let_go = sum(int(m.group(2)) for line in woken if (m := LET_GO.search(line)))
        fenced = sum(1 for line in woken if FENCED.search(line))
        repeats = Counter(calls)
        twice = sum(1 for f, n in repeats.items() if n > 1 and f in expected)
        TALLY.events += len(expected)
        TALLY.violations += len(problems)
        TALLY.figures.append(
            f"webhook spike with a zombie: {len(jobs):,} slots, {len(calls):,} calls; worker-2 "
            f"held partitions {sorted(zombie_parts)} ({len(zombie_jobs):,} slots), stopped at "
            f"{STOP_AT:.0%} of the calls for {(woken_ms - stopped_ms) / 1000:.1f} s; the new "
            f"owner ran {taken_over:,} of its slots; woken, it let go of {let_go:,} waiting "
            f"runs and fenced {fenced} records; {twice} fire ids called twice (in flight at "
            "the stop)")
        assert problems == [], "\n".join(problems)
        assert taken_over > 0, "the zombie's partitions were drained before it was stopped"
        assert let_go + fenced > 0, \
            "the zombie's log shows no run it let go of or fenced once woken"
    with_workers(stack, ["worker-2"], scenario)
