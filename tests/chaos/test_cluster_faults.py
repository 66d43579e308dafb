"""Faults on a real cluster (issue 29, item 4): the fault suite's checker on a three-broker stack
(``CRONSTREAM_BROKERS=3``: three KRaft nodes, each broker and controller, every topic replicated
three times with ``min.insync.replicas`` 2), while one node is SIGKILLed or all three are
restarted in turn.

1. the broker leading most ``cronstream.fired`` partitions, SIGKILLed in the second after a
   20k-job top-of-minute spike and back 30 s later;
2. the broker leading most ``cronstream.fanout`` and ``cronstream.recipients`` partitions,
   SIGKILLed mid-campaign and restarted;
3. the active KRaft controller, SIGKILLed and restarted while jobs fire every second and a
   campaign sends;
4. a rolling restart of the three nodes (stop, wait, start, wait until every replica is in sync)
   while jobs fire every second and a campaign sends.

Each is judged as the one-broker scenarios are (``checker``: every slot decided once, no address
mailed twice, every recipient one terminal outcome, Postgres equal to Kafka), and each measures
how long firing and sending stalled: the longest gap between consecutive fires (the ledger's
``fired_at``) and between consecutive SES calls of the campaign, around the fault. The figures
go into the tally (``TALLY.figures``), printed at the end of the run.

Skipped unless the session's stack has three brokers, so the default one-broker ``./dev test``
collects and skips them at no cost::

    CRONSTREAM_BROKERS=3 CRONSTREAM_HOME=/tmp/three ... ./dev test tests/chaos/test_cluster_faults.py
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx
import psycopg
import pytest

from bench.receiver import Receiver as SpikeReceiver
from cli.demo import Receiver
from stack import cluster, processes
from stack.local import Stack, broker_count_of
from streams.runtime import settings
from streams.scheduling.schedule import fire_id
from streams.topology import FANOUT, FIRED, RECIPIENTS
from tests.chaos.checker import TALLY, Stops, every_second, slot_violations, slots_violations
from tests.chaos.test_faults import OUTAGE_S, N, at_fraction, finish, start_campaign
from tests.chaos.workloads import import_spike, sleep_until
from tests.conftest import free_port
from tests.waiting import wait_for


def _brokers() -> int:
    wanted = os.environ.get("CRONSTREAM_BROKERS")
    return int(wanted) if wanted else broker_count_of(settings.load().home)


pytestmark = [
    pytest.mark.skipif(_brokers() < 3, reason="faults on a cluster need the three-broker stack: "
                       "CRONSTREAM_BROKERS=3 with a stack home of its own (docs/testing.md)"),
    pytest.mark.timeout(1200),
]

SPIKE_JOBS = N  # 20k jobs due in the same second (200k in soak mode)
SPIKE_LEAD_S = 60  # from the end of the import to the spike: the workers index the jobs first
SPIKE_DOWN_S = 30  # the killed broker is back this long after the kill
TICKING_JOBS = 5  # jobs firing every second through scenarios 3 and 4
ROLLING_PAUSE_S = 5  # a node stays down this long in the rolling restart
ROLLING_RATE = 400  # the rolling restart's campaign, per second: a call a walker a second
# 120 s at that rate (500 s in soak mode): past a restart of 40-60 s here, 90-117 s loaded
ROLLING_RECIPIENTS = max(N, 48_000)


@pytest.fixture(autouse=True)
def whole_cluster(stack: Stack) -> Iterator[None]:
    """Every scenario starts, and leaves, with all three nodes up, every replica in sync and the
    worker and API running: a scenario that failed half-way leaves no node down for the next. A
    worker or API that died during the scenario is restarted, and the scenario errs naming it
    and its log's last line (a worker was seen to abort inside librdkafka at a controller's
    kill)."""
    assert stack.brokers >= 3, "the session's stack has fewer than three brokers"
    _restore(stack)
    yield
    died = _restore(stack)
    assert not died, f"died during the scenario (restarted since): {died}"


def _restore(stack: Stack) -> dict[str, str]:
    """Start whatever is down; the app processes that were, with their log's last line."""
    for node in range(1, stack.brokers + 1):
        if processes.alive(stack.pidfile(stack.node_name(node))) is None:
            cluster.start_node(stack, node)
    cluster.wait_in_sync(stack)
    died = {}
    for name in ("worker-1", "api"):
        if processes.alive(stack.pidfile(name)) is None:
            lines = stack.log(name).read_text(errors="replace").splitlines()
            died[name] = lines[-1] if lines else ""
            if name == "api":
                stack.start_api()
            else:
                stack.start_worker(name)
    return died


# -- what a scenario measures ------------------------------------------------------------------


def longest_gap_s(times_ms: list[int]) -> float:
    """The longest time between two consecutive instants (0 for fewer than two)."""
    ordered = sorted(times_ms)
    return max((b - a for a, b in zip(ordered, ordered[1:], strict=False)), default=0) / 1000


def ses_call_times(stack: Stack, campaign_id: str) -> list[int]:
    """When the local SES server got each call of the campaign (ms)."""
    calls = httpx.get(f"{stack.s.ses_endpoint}/_local/calls", params={"campaign": campaign_id},
                      timeout=60).json()
    return [c["arrived_ms"] for c in calls]


def sending(stack: Stack, campaign_id: str, first_fault_ms: int) -> str:
    """The longest gap between the campaign's SES calls, beside the longest before the first
    fault: a campaign's own pacing (the rolling restart's: a call from each walker every second)
    is part of every gap, and no stall."""
    times = ses_call_times(stack, campaign_id)
    span = (max(times) - min(times)) / 1000 if times else 0.0
    before = longest_gap_s([t for t in times if t <= first_fault_ms])
    return (f"sending stalled at most {longest_gap_s(times):.1f} s between SES calls "
            f"({len(times)} calls over {span:.0f} s; at most {before:.1f} s apart before the "
            "first fault)")


@dataclass
class Fires:
    """The ledger's rows of some of a tenant's job slots, read from Postgres."""

    fired_ms: list[int]  # when each slot was fired (the scheduler's ``fired_at``)
    decisions: Counter[str]
    late_ms: list[int]  # how late each fired slot was fired (``lateness_ms``)

    @classmethod
    def read(cls, stack: Stack, tenant: str, job_ids: list[str]) -> Fires:
        with psycopg.connect(stack.s.pg_dsn) as conn:
            rows = conn.execute(
                "SELECT fired_at, decision, lateness_ms FROM ledger WHERE kind = 'job' AND "
                "tenant = %s AND job_id = ANY(%s)", (tenant, job_ids)).fetchall()
        return cls([int(r[0].replace(tzinfo=UTC).timestamp() * 1000) for r in rows if r[0]],
                   Counter(r[1] for r in rows), [r[2] for r in rows if r[0]])

    def summary(self) -> str:
        decided = ", ".join(f"{n} {d}" for d, n in self.decisions.most_common())
        late = max(self.late_ms, default=0) / 1000
        return (f"firing stalled at most {longest_gap_s(self.fired_ms):.1f} s between fires, "
                f"the latest fired {late:.1f} s after its slot; {decided}")


# -- jobs ---------------------------------------------------------------------------------------


@contextmanager
def ticking_jobs(api: httpx.Client, url: str, start: datetime) -> Iterator[list[str]]:
    """``TICKING_JOBS`` jobs firing every second from ``start`` (for at most an hour), deleted
    on the way out whatever happened: a failed scenario leaves nothing firing on the box."""
    body = {"schedule": {"every_s": 1, "start": start.isoformat(),
                         "end": (start + timedelta(hours=1)).isoformat()},
            "target": {"type": "webhook", "url": url}}
    jobs = [api.post("/v1/jobs", json=body).json()["id"] for _ in range(TICKING_JOBS)]
    try:
        yield jobs
    finally:
        for job_id in jobs:
            api.delete(f"/v1/jobs/{job_id}")  # 404 once stop_ticking has deleted it


def stop_ticking(stack: Stack, api: httpx.Client, tenant: str, jobs: list[str],
                 start: datetime, fires: list[str]) -> Fires:
    """Judge the ticking jobs' slots from ``start`` to 10 s ago, then delete the jobs; what
    their ledger rows say about firing around the fault."""
    start_ms = int(start.timestamp() * 1000)
    cut_ms = int(time.time() * 1000) - 10_000
    slots = every_second(start_ms, cut_ms)
    wanted = {fire_id(j, s) for j in jobs for s in slots}

    def decided() -> int:
        with psycopg.connect(stack.s.pg_dsn) as conn:
            return len({r[0] for r in conn.execute(
                "SELECT fire_id FROM ledger WHERE kind = 'job' AND job_id = ANY(%s)",
                (jobs,)).fetchall()} & wanted)

    wait_for(lambda: decided() >= len(wanted), timeout_s=300, every_s=3,
             explain=lambda: f"{decided()}/{len(wanted)} slots decided")
    for job_id in jobs:
        assert api.delete(f"/v1/jobs/{job_id}").status_code in (200, 204)
    deadline = time.monotonic() + 120  # the sink is eventually consistent
    # the jobs' default policy, fire_once, skips the slots a stall made late (more than the
    # misfire threshold: the checker holds every skipped slot to that)
    while (problems := [p for j in jobs for p in slot_violations(
            stack, j, slots, fires, explained={"skipped_policy"})]) and \
            time.monotonic() < deadline:
        time.sleep(5)
    TALLY.events += len(wanted)
    TALLY.violations += len(problems)
    assert problems == [], problems
    with psycopg.connect(stack.s.pg_dsn) as conn:
        rows = conn.execute(
            "SELECT fired_at, decision, lateness_ms FROM ledger WHERE kind = 'job' AND "
            "job_id = ANY(%s) AND nominal_time <= %s", (jobs, datetime.fromtimestamp(
                cut_ms / 1000, UTC).replace(tzinfo=None))).fetchall()
    return Fires([int(r[0].replace(tzinfo=UTC).timestamp() * 1000) for r in rows if r[0]],
                 Counter(r[1] for r in rows), [r[2] for r in rows if r[0]])


@dataclass
class Workload:
    """The campaign a scenario's fault lands in; ``fires`` is filled once its jobs are judged."""

    campaign_id: str
    fires: Fires = field(default_factory=lambda: Fires([], Counter(), []))
    stops: list[int] = field(default_factory=list)  # when a node went down: walkers may stop


@contextmanager
def jobs_firing_and_a_campaign_sending(stack: Stack, api: httpx.Client, tag: str,
                                       max_rate_per_s: int, from_fraction: float, n: int = N
                                       ) -> Iterator[Workload]:
    """``TICKING_JOBS`` every-second jobs and an ``n``-recipient campaign, entered once
    ``from_fraction`` of the campaign is sent: the body injects the fault. On the way out the
    campaign and the jobs' slots are judged (``finish``, ``stop_ticking``)."""
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
    with Receiver(port := free_port(), quiet=True) as receiver, \
            ticking_jobs(api, f"http://127.0.0.1:{port}/tick", start) as jobs:
        sleep_until(start + timedelta(seconds=5))
        campaign_id, subject, emails = start_campaign(api, tag, n, max_rate_per_s=max_rate_per_s)
        at_fraction(stack, campaign_id, n, from_fraction)
        work = Workload(campaign_id)
        yield work
        finish(stack, campaign_id, subject, emails, stops=Stops(None, work.stops))
        work.fires = stop_ticking(stack, api, api.tenant, jobs, start, receiver.fires)


# -- the scenarios ------------------------------------------------------------------------------


def test_fired_leader_sigkilled_in_the_second_after_a_20k_spike(stack, api):
    """20k one-off jobs due in the same second; in the next second the broker leading most
    ``cronstream.fired`` partitions is SIGKILLed, and it is back 30 s later: every slot is
    decided once, every run recorded, no webhook called twice. The receiver is the benchmarks'
    (``bench.receiver``: its own process, keep-alive, the arrival time of each call), so the
    drain measures the stack, not a test's threaded HTTP server."""
    with SpikeReceiver() as receiver:
        # the import takes tens of seconds: plan the spike after it, at a minute's start
        began = datetime.now(UTC)
        lead = timedelta(seconds=SPIKE_LEAD_S + SPIKE_JOBS / 1000)
        spike = (began + lead).replace(second=0, microsecond=0) + timedelta(minutes=1)
        jobs = import_spike(api, receiver.url, spike, SPIKE_JOBS)
        imported_s = (datetime.now(UTC) - began).total_seconds()
        assert datetime.now(UTC) < spike - timedelta(seconds=20), \
            f"the import took {imported_s:.0f} s and left the workers no time to index the jobs"
        sleep_until(spike - timedelta(seconds=5))
        node, led = cluster.busiest_leader(stack, [FIRED.name])
        sleep_until(spike + timedelta(seconds=1))
        cluster.kill_node(stack, node)
        killed = datetime.now(UTC)
        TALLY.faults += 1
        time.sleep(SPIKE_DOWN_S)
        cluster.start_node(stack, node)
        back_s = (datetime.now(UTC) - killed).total_seconds()
        in_sync_s = cluster.wait_in_sync(stack)
        spike_ms = int(spike.timestamp() * 1000)
        expected = {fire_id(j, spike_ms) for j in jobs}
        wait_for(lambda: sum(Fires.read(stack, api.tenant, jobs).decisions.values())
                 >= len(jobs), timeout_s=600, every_s=5,
                 explain=lambda: f"{Fires.read(stack, api.tenant, jobs).decisions} of {len(jobs)}")
        arrivals = receiver.dump().pairs
        deadline = time.monotonic() + 120
        while (problems := slots_violations(stack, expected, [f for f, _ in arrivals])) and \
                time.monotonic() < deadline:
            time.sleep(5)
            arrivals = receiver.dump().pairs
        fires = Fires.read(stack, api.tenant, jobs)
    TALLY.events += len(expected)
    TALLY.violations += len(problems)
    times = [at // 1_000_000 for _, at in arrivals]
    TALLY.figures.append(
        f"cluster: fired leader (node {node}, {led} partitions) SIGKILLed 1 s after a "
        f"{len(jobs):,}-job spike (imported in {imported_s:.0f} s): back after {back_s:.0f} s, "
        f"in sync {in_sync_s:.0f} s later; {fires.summary()}; {len(arrivals):,} webhook calls, "
        f"the last {(max(times, default=spike_ms) - spike_ms) / 1000:.1f} s after the slot, "
        f"runs stalled at most {longest_gap_s(times):.1f} s between calls")
    assert problems == [], "\n".join(problems)
    # each slot ran, on time or caught up (one-off jobs with 600 s of lateness)
    assert set(fires.decisions) <= {"fired", "missed_caught_up"}, fires.decisions


def test_fanout_and_recipients_leader_sigkilled_mid_campaign(stack, api):
    """The broker leading most ``cronstream.fanout`` and ``cronstream.recipients`` partitions,
    SIGKILLed at a fifth of a 20k-recipient campaign, restarted after the outage."""
    campaign_id, subject, emails = start_campaign(api, "cluster-fanout", max_rate_per_s=1500)
    node, led = cluster.busiest_leader(stack, [FANOUT.name, RECIPIENTS.name])
    at_fraction(stack, campaign_id, N, 0.2)
    killed = time.time_ns() // 1_000_000
    cluster.kill_node(stack, node)
    TALLY.faults += 1
    time.sleep(OUTAGE_S)
    cluster.start_node(stack, node)
    in_sync_s = cluster.wait_in_sync(stack)
    finish(stack, campaign_id, subject, emails, stops=Stops(None, [killed]))
    TALLY.figures.append(
        f"cluster: fan-out/recipients leader (node {node}, {led} partitions) SIGKILLed at 20 % "
        f"of {len(emails):,} recipients, back after {OUTAGE_S} s, in sync {in_sync_s:.0f} s "
        f"later; {sending(stack, campaign_id, killed)}")


def test_active_controller_sigkilled_while_jobs_fire_and_a_campaign_sends(stack, api):
    """The quorum's leader (broker and controller in one JVM) SIGKILLed and restarted after the
    outage, with jobs firing every second and a campaign sending."""
    with jobs_firing_and_a_campaign_sending(stack, api, "cluster-controller", 1500, 0.2) as work:
        node = cluster.active_controller(stack)
        work.stops.append(time.time_ns() // 1_000_000)
        cluster.kill_node(stack, node)
        TALLY.faults += 1
        time.sleep(OUTAGE_S)
        cluster.start_node(stack, node)
        in_sync_s = cluster.wait_in_sync(stack)
        elected = cluster.active_controller(stack)
    TALLY.figures.append(
        f"cluster: active controller (node {node}) SIGKILLed, back after {OUTAGE_S} s, in sync "
        f"{in_sync_s:.0f} s later, node {elected} leads the quorum; {work.fires.summary()}; "
        f"{sending(stack, work.campaign_id, work.stops[0])}")


def test_rolling_restart_of_the_three_brokers_while_jobs_fire_and_a_campaign_sends(stack, api):
    """Each node in turn: stopped (SIGTERM, a controlled shutdown), down ``ROLLING_PAUSE_S``,
    started, and the next only once every replica is in sync again; jobs fire every second and
    a campaign sends slowly enough to span the whole restart: 400 a second, so each of the
    eight walkers calls SES every second (50 addresses a call) and the longest gap between calls
    is the stall, not the pacing (at 100 a second it was a call per walker every 4 s, all in
    step). The campaign must still be sending after the last node is back, or the last stop's
    stall would go unmeasured."""
    with jobs_firing_and_a_campaign_sending(stack, api, "cluster-rolling", ROLLING_RATE, 0.05,
                                            ROLLING_RECIPIENTS) as work:
        rounds = []
        began = time.monotonic()
        for node in range(1, stack.brokers + 1):
            work.stops.append(time.time_ns() // 1_000_000)
            cluster.stop_node(stack, node)
            TALLY.faults += 1
            time.sleep(ROLLING_PAUSE_S)
            cluster.start_node(stack, node)
            rounds.append(cluster.wait_in_sync(stack))
        rolled_s = time.monotonic() - began
        calls = ses_call_times(stack, work.campaign_id)
        sent_by_then = len(calls)
        last_back_ms = work.stops[-1] + ROLLING_PAUSE_S * 1000
        assert max(calls, default=0) > last_back_ms, (
            f"the campaign's last SES call came before node {stack.brokers} was back: the "
            f"restart ({rolled_s:.0f} s) outlasted ROLLING_RECIPIENTS at ROLLING_RATE")
    TALLY.figures.append(
        f"cluster: rolling restart of {stack.brokers} nodes in {rolled_s:.0f} s (in sync "
        f"{', '.join(f'{s:.0f}' for s in rounds)} s after each start), {sent_by_then} SES calls "
        f"made by its end; {work.fires.summary()}; "
        f"{sending(stack, work.campaign_id, work.stops[0])}")
