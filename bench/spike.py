"""Top-of-minute spike: N jobs due in the same second, with M idle schedules loaded.

    .venv/bin/python -m bench.spike [--jobs 100000] [--idle 1000000] [--workers 2] [--minutes 2]
                                    [--target webhook|kafka] [--ceiling-requests 5000]
                                    [--peer|--no-peer] [--peer-instances 2] [--peer-threads 40]
                                    [--peer-warmup 0] [--victim|--no-victim]
                                    [--slow-share 0] [--slow-delay-s 5] [--slow-timeout-s S]

Runs on the real local stack (started if needed). Jobs are written straight to the jobs topic
(the API's validation is not what is measured): the idle ones as ``0 0 1 1 *``, then the spike
jobs as ``0 * * * * *`` (every minute at second 0) starting at a minute boundary far enough
ahead that the workers have indexed them all before it, so the first measured slot is the first
one of every spike job and no earlier spike is still running when it comes. The spikes of
``--minutes`` consecutive minutes are measured, each on its own: on a fresh stack the first is
the broker's first burst of this kind of traffic (its JVM compiles the code paths for it while
serving it: the JIT compiler threads' share of the cores is printed), the next one what a
stack that has run before does. Every fired record of those slots is read back from
``cronstream.fired`` (once the last spike is over: reading it while it happened took cores
from it) and its fire lag (the record's CreateTime, set when the scheduler produced it, minus
the nominal time) measured; every ledger record of them from ``cronstream.ledger`` gives the
run lag (the executor's record of the outcome, minus the nominal time): what a user of the
target sees. Afterwards all benchmark jobs are deleted (tombstones).

``--target webhook`` (the default; issue 28: what a user waits for is their URL being called)
points every spike job at a receiver on loopback in its own process (``bench.receiver``), as
tenant ``bench`` allowed to call 127.0.0.1; the box's HTTP ceiling (that receiver driven alone
by the executor's client, and by aiohttp for comparison) is measured and printed first, on the
idle stack. The webhook jobs end after the last measured minute (a drain may outlast a minute,
and the next, unmeasured, spike would pile on it). Headline figures per spike: run lag
(arrival at the receiver minus nominal time) p50/p99/max, runs/s from the first to the last
arrival (and from the nominal time to it), slots never received, duplicates received, the
ledger's outcome for every slot, and where the box's cores went (sampled every second, the
receiver's included) from a second before the spike to its last arrival, with the CPU each run
cost; fire lag comes second. Nothing is read from the topics until every slot has arrived (or
none came for ``QUIET_S``).

Then, for webhooks (``--no-peer`` to skip it), the real peer runs the same spike on the same box
in the same command: db-scheduler (``bench.peer.run_peer``: ``--peer-instances`` instances of
``--peer-threads`` threads, bench.peer's tuned 40 by default, on the stack's PostgreSQL), the same
``--jobs`` due in one second beside the same ``--idle``, calling a fresh receiver of the same kind
(``bench.receiver``): cronstream's receiver has stopped by then, and a fresh one keeps the two
systems' arrivals apart by construction (``run_peer`` waits on the receiver's request count,
which cronstream's late duplicates would have inflated). Before it, the benchmark waits until
the workers have applied the run's job deletions (the tombstones of every spike and idle job)
and the ledger sink has written the run's ledger to PostgreSQL (``settle``), and leaves the
stack up: stopping the workers instead would hand the tombstones to the next run, whose workers
would apply them while it loads, and the idle stack's cores are read in the peer's window
(``bystanders``) to show whether it took any. The peer's Java is built (``bench.peer
.ensure_built``) before cronstream's spike, so a failed build costs no measurement. Printed
last: each cronstream spike's runs/s and run lag p50/p99/max beside the peer's spike, and the
runs/s ratio cronstream/peer of each cronstream spike (``bench.comparison``), all from this run.
Isolation (issue 28, webhooks; ``bench.isolation``), printed in a block of its own after the
figures. ``--victim`` (on by default): another tenant, ``bench-victim`` (allowed to call
127.0.0.1 like ``bench``), has one job firing every second (``* * * * * *``) from a few seconds
before the first spike, POSTing to the same receiver on a path of its own (``/victim``: the
same host, so what protects it is the tenants' turns, not the per-host limit; the receiver
counts the paths apart, so the spike's drain is waited for on the spike's requests alone, then
the victim's up to the spike's last arrival). Per spike: the victim's run lag p50/p99/max and
the slots missing among those nominally from the spike's second to the spike's last arrival,
against a p99 of 2 s. ``--slow-share 0.1``: that share of the spike jobs, spread through them,
call a second receiver (another port: another host) that answers each request
``--slow-delay-s`` after it came, with a timeout of that plus 5 s (``--slow-timeout-s``); per
spike, the fast and the slow jobs apart: run lag p50/p99/max, missing and duplicate arrivals,
and the ledger's word on each slot (succeeded, failed, expired_stale). The point: the fast ones
keep their run lag. The whole spike's figures above count both groups. The victim's job is
created and indexed with the spike's and deleted with them; the peer gets neither a victim nor
slow jobs.
``--target kafka`` keeps the Kafka-record scenario and its figures (no peer).
Target: 10k fires/s with p99 fire lag <= 1 s; webhooks: run lag p99 <= 10 s (seed 001).
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from bench import comparison, isolation, peer
from bench import receiver as http_receiver
from bench.common import (
    component_pids,
    count_at_least,
    cpu_seconds,
    cpu_share,
    group_lag,
    jit_cpu_seconds,
    percentile,
    report,
    rss_peak_mib,
    stack_with_workers,
    topic_ends,
    wait_consumed,
)
from bench.runs import first_arrivals
from stack import processes
from streams.adapters import tenants
from streams.runtime.clock import now_ms
from streams.runtime.codec import codec
from streams.runtime.emit import Emitter
from streams.runtime.kafka_config import client_config
from streams.scheduling.schedule import fire_id
from streams.topology import FIRED, JOBS, LEDGER, TopicSpec, consumer_group

SPIKE_INDEX_RATE = 1_000  # spike jobs/s the workers are assumed to index at, to plan the spike
SPIKE_MARGIN_S = 30
RUNS_WAIT_S = 600  # how long after the spike the runs are waited for
CPU_WINDOW_S = (1.0, 3.0)  # where the box's cores went: from before the spike to after it
# nothing is read before this long after the spike: the figures come from the records' own
# timestamps, and decoding 100k fired records as they came took a quarter of a core from the
# system under test in the spike's own second
READ_AFTER_S = CPU_WINDOW_S[1] + 2
QUIET_S = 30.0  # webhook: no arrival for this long after the last spike, the drain is over
SAMPLE_S = 1.0  # webhook: how often every component's CPU is read during the drain
SETTLE_S = 900  # how long the peer waits for cronstream's stack to be done with the run
LEDGER_SINK_GROUP = "connect-cronstream-ledger-sink"  # Kafka Connect's group for the ledger sink
TENANT = "bench"
KAFKA_TARGET = {"type": "kafka", "topic": f"{TENANT}.fires", "value": "tick"}
WEBHOOK_TIMEOUT_S = 10.0
# issue 28's isolation: another tenant's job firing every second through the spike, at the same
# receiver (the same host: what protects it is the tenants' turns, not the per-host limit)
VICTIM_TENANT = "bench-victim"
VICTIM_CRON = "* * * * * *"
VICTIM_PATH = "/victim"  # its path at the receiver, whose requests are counted apart
VICTIM_LEAD_S = 5  # its first slot is this long before the spike: it is running when it comes
SLOW_TIMEOUT_MARGIN_S = 5.0  # a slow job's timeout: the slow receiver's delay plus this


def webhook_target(url: str, timeout_s: float = WEBHOOK_TIMEOUT_S) -> dict[str, Any]:
    return {"type": "webhook", "url": url, "method": "POST", "timeout_s": timeout_s}


def job(job_id: str, cron: str, now: int, misfire_policy: str = "skip",
        max_lateness_s: int = 60, start_ms: int | None = None,
        target: dict[str, Any] | None = None, end_ms: int | None = None,
        tenant: str = TENANT) -> bytes:
    """A benchmark job as the API would have written it, firing into a Kafka topic unless
    another ``target`` is given."""
    return codec().encode("Job", {
        "job_id": job_id, "tenant": tenant, "revision": 1,
        "schedule": {"cron": cron, "timezone": "UTC", "start_ms": start_ms, "end_ms": end_ms},
        "target": target or KAFKA_TARGET,
        "misfire_policy": misfire_policy, "max_lateness_s": max_lateness_s,
        "retry_max_attempts": 1, "created_ms": now, "updated_ms": now,
    })


def load(emitter: Emitter, prefix: str, count: int, cron: str, start_ms: int | None = None,
         misfire_policy: str = "skip", max_lateness_s: int = 60,
         target: dict[str, Any] | None = None, end_ms: int | None = None) -> list[str]:
    ids = job_ids(prefix, count)
    return produce(emitter, ids, cron, start_ms, misfire_policy, max_lateness_s, target, end_ms)


def job_ids(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i:07d}" for i in range(count)]


def produce(emitter: Emitter, ids: list[str], cron: str, start_ms: int | None = None,
            misfire_policy: str = "skip", max_lateness_s: int = 60,
            target: dict[str, Any] | None = None, end_ms: int | None = None,
            tenant: str = TENANT) -> list[str]:
    """Write the jobs ``ids`` to the jobs topic, all alike, and wait for the broker."""
    now = now_ms()
    for job_id in ids:
        emitter.produce(JOBS, job_id, job(job_id, cron, now, misfire_policy, max_lateness_s,
                                          start_ms, target, end_ms, tenant))
    emitter.flush(120)
    return ids


def plan_spike(jobs: int) -> int:
    """The first minute boundary the spike jobs can be indexed before (see SPIKE_INDEX_RATE)."""
    earliest = now_ms() + (jobs / SPIKE_INDEX_RATE + SPIKE_MARGIN_S) * 1000
    return int(-(-earliest // 60_000) * 60_000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=count_at_least(1), default=100_000)
    parser.add_argument("--idle", type=count_at_least(0), default=1_000_000)
    parser.add_argument("--workers", type=count_at_least(1), default=2)
    parser.add_argument("--minutes", type=count_at_least(1), default=2,
                        help="spikes measured, a minute apart (the jobs fire every minute): the "
                             "first is the stack's first burst of its kind, the next ones are "
                             "what a stack that has run before does")
    parser.add_argument("--target", choices=("webhook", "kafka"), default="webhook",
                        help="what every spike job runs: a webhook POST to a receiver on loopback "
                             "(what a user waits for), or a Kafka record")
    parser.add_argument("--ceiling-requests", type=count_at_least(0), default=5_000,
                        help="webhook: requests per client for the box's HTTP ceiling, measured "
                             "before the spike (0: not measured)")
    parser.add_argument("--peer", action=argparse.BooleanOptionalAction, default=None,
                        help="after cronstream's spikes, run the peer (db-scheduler, bench.peer) "
                             "on the same --jobs/--idle and compare (default: on for --target "
                             "webhook; the peer only calls webhooks)")
    parser.add_argument("--peer-instances", type=count_at_least(1), default=2,
                        help="db-scheduler instances (as cronstream's 2 workers)")
    parser.add_argument("--peer-threads", type=count_at_least(1), default=peer.TUNED_THREADS,
                        help="execution threads per db-scheduler instance (default: bench.peer's "
                             f"tuned {peer.TUNED_THREADS})")
    parser.add_argument("--peer-warmup", type=count_at_least(0), default=0,
                        help="tasks of an unmeasured spike the peer's instances run first (their "
                             "JVMs compile the spike's code paths); 0: the measured spike is "
                             "their first")
    parser.add_argument("--victim", action=argparse.BooleanOptionalAction, default=None,
                        help=f"webhook: another tenant ({VICTIM_TENANT}) has one job firing every "
                             "second through the spike, calling the same receiver; its run lag "
                             "is reported per spike (default: on for --target webhook)")
    parser.add_argument("--slow-share", type=share_of_jobs, default=0.0,
                        help="webhook: this share of the spike jobs (0 to below 1) call a second "
                             "receiver, another host, that answers after --slow-delay-s; fast "
                             "and slow jobs are reported apart (default 0: none)")
    parser.add_argument("--slow-delay-s", type=seconds_at_least(0.0), default=5.0,
                        help="how long the slow receiver takes to answer each request")
    parser.add_argument("--slow-timeout-s", type=seconds_at_least(0.001), default=None,
                        help="the slow jobs' webhook timeout (default: --slow-delay-s + "
                             f"{SLOW_TIMEOUT_MARGIN_S:.0f})")
    args = parser.parse_args()
    with_peer = args.target == "webhook" if args.peer is None else args.peer
    if with_peer and args.target != "webhook":
        parser.error("--peer compares webhook runs: it needs --target webhook")
    args.victim = args.target == "webhook" if args.victim is None else args.victim
    if args.target != "webhook" and (args.victim or args.slow_share):
        parser.error("--victim and --slow-share are webhook scenarios: they need --target webhook")
    if args.slow_timeout_s is None:
        args.slow_timeout_s = args.slow_delay_s + SLOW_TIMEOUT_MARGIN_S

    conf, stack, workers = stack_with_workers(args.workers)
    if with_peer:  # built before anything is measured: a failed build costs no spike
        peer.ensure_built(conf)
    figures: dict[str, object] = {"target": args.target}
    receiver = slow_receiver = None
    try:
        if args.target == "webhook":
            if args.ceiling_requests:
                figures["HTTP ceiling (receiver driven alone)"] = \
                    http_ceiling(args.ceiling_requests)
            receiver = http_receiver.Receiver().start()
            figures["target"] = f"webhook: {receiver.url}, a receiver in its own process " \
                                f"({receiver.loop} loop)"
            if args.slow_share:
                slow_receiver = http_receiver.Receiver(delay_s=args.slow_delay_s).start()
            # the jobs are written straight to the jobs topic: their tenants must let them call
            # loopback
            tenants.create(conf.bootstrap, TENANT,
                           partitions=conf.partitions, allowed_targets=["127.0.0.1"])
            if args.victim:
                tenants.create(conf.bootstrap, VICTIM_TENANT,
                               partitions=conf.partitions, allowed_targets=["127.0.0.1"])
        figures |= spike_run(args, conf, stack, workers, receiver, slow_receiver)
    finally:
        for started in (receiver, slow_receiver):
            if started is not None:
                started.stop()
    params: dict[str, object] = {"workers": args.workers, "jobs": args.jobs, "idle": args.idle,
                                 "minutes": args.minutes, "target": args.target,
                                 "ceiling_requests": args.ceiling_requests, "peer": with_peer,
                                 "victim": args.victim, "slow_share": args.slow_share}
    if args.slow_share:
        params |= {"slow_delay_s": args.slow_delay_s, "slow_timeout_s": args.slow_timeout_s}
    if not with_peer:
        report("spike", figures, params)
        print_isolation(figures, args.minutes)
        return
    params |= {"peer_instances": args.peer_instances, "peer_threads": args.peer_threads,
               "peer_warmup": args.peer_warmup, "db-scheduler": peer.DB_SCHEDULER}
    try:
        figures["settled before the peer"], theirs = peer_run(args, conf, stack, workers)
    except BaseException as exc:  # cronstream's figures are kept, with why there is no comparison
        figures["peer"] = f"failed: {exc!r}"
        report("spike", figures, params)
        print_isolation(figures, args.minutes)
        raise
    figures["peer: db-scheduler"] = theirs
    compared = comparison.compare({name: figures[name] for name in spike_names(args.minutes)},
                                  theirs)
    figures["comparison (this run)"] = compared
    report("spike", figures, params)
    print_isolation(figures, args.minutes)
    warmup = f", after an unmeasured {args.peer_warmup:,}-task warm-up" if args.peer_warmup else \
        ", its instances' first spike (no warm-up)"
    print("\n".join(comparison.lines(compared, f"{theirs['peer']}{warmup}; --peer-threads "
                                                f"default {peer.TUNED_THREADS} (bench.peer's tuned "
                                                "value)")), flush=True)


def share_of_jobs(text: str) -> float:
    """An argparse type for ``--slow-share``: a share of the spike jobs, from 0 to below 1 (some
    jobs must stay fast: they are what is measured against the slow ones)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not from 0 to below 1")
    return value


def seconds_at_least(minimum: float) -> Callable[[str], float]:
    """An argparse type for a duration in seconds of at least ``minimum``."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not value >= minimum:  # NaN too
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        return value
    return parse


ABOUT_GROUPS = ("fast jobs", "slow jobs", "victim")  # the figures that say what each group was


def print_isolation(figures: dict[str, Any], minutes: int) -> None:
    """The isolation block (``bench.isolation.lines``), if the run had a victim or slow jobs."""
    spikes = {name: figures[name] for name in spike_names(minutes)
              if isinstance(figures.get(name), dict)}
    about = [f"{name}: {figures[name]}" for name in ABOUT_GROUPS if name in figures]
    if about:
        print("\n".join(isolation.lines(spikes, about)), flush=True)


def spike_names(minutes: int) -> list[str]:
    """The name of each measured spike, in the figures."""
    return ["first spike" if i == 0 else f"spike {i + 1} (a minute later)" if i == 1 else
            f"spike {i + 1}" for i in range(minutes)]


def peer_run(args: argparse.Namespace, conf: Any, stack: Any, workers: list[str]
             ) -> tuple[dict[str, object], dict[str, Any]]:
    """The peer's spike on the same box once cronstream's stack has settled (``settle``), with a
    fresh receiver of the same kind: the settling, and the peer's figures."""
    settled = settle(conf.bootstrap)
    print(f"before the peer: {settled}", flush=True)
    # cronstream's stack stays up, idle: its cores in the peer's window show it took none
    bystanders = {name: pid for name, pid in component_pids(stack, workers).items()
                  if name != "postgres"}  # the peer's database: its own figure
    with http_receiver.Receiver() as receiver:
        print(f"[peer] db-scheduler {peer.DB_SCHEDULER}: {args.peer_instances} instances x "
              f"{args.peer_threads} threads, {args.jobs:,} tasks due in the same second beside "
              f"{args.idle:,} idle, receiver {receiver.url} ({receiver.loop} loop)", flush=True)
        theirs = peer.run_peer(conf, args.jobs, args.peer_instances, args.peer_threads, receiver,
                               idle=args.idle, warmup=args.peer_warmup, bystanders=bystanders)
        theirs["receiver event loop"] = receiver.loop
    return settled, theirs


def settle(bootstrap: str, timeout_s: float = SETTLE_S, every_s: float = 2.0
           ) -> dict[str, object]:
    """Wait until cronstream's stack is done with the run before the peer's: the workers have
    applied the run's job deletions (1.1M tombstones by default) and the ledger sink has written
    the run's ledger records to PostgreSQL (the peer's database server). Seconds each took from
    now, or how much was left at ``timeout_s``."""
    started = time.monotonic()
    waits: dict[str, object] = {}
    steps: list[tuple[str, str, TopicSpec]] = [
        ("workers applied the job deletions s", consumer_group(JOBS), JOBS),
        ("ledger sink wrote the ledger s", LEDGER_SINK_GROUP, LEDGER)]
    for label, group, topic in steps:
        while (left := group_lag(bootstrap, group, topic.name)) > 0 \
                and time.monotonic() - started < timeout_s:
            time.sleep(every_s)
        waits[label] = round(time.monotonic() - started, 1) if left <= 0 else \
            f"{left:,} records not consumed after {timeout_s:.0f} s"
    return waits


def http_ceiling(requests: int) -> dict[str, object]:
    """The box's HTTP ceiling (``bench.receiver.ceiling``), printed as it is measured."""
    print(f"HTTP ceiling: a receiver on 127.0.0.1 driven alone, {requests:,} POSTs per client, "
          "on the idle stack", flush=True)
    measured = {}
    for result in http_receiver.ceiling(requests):
        print(f"  {result.line()}", flush=True)
        measured[result.client] = result.figures()
    return measured


def spike_run(args: argparse.Namespace, conf: Any, stack: Any, workers: list[str],
              receiver: http_receiver.Receiver | None,
              slow_receiver: http_receiver.Receiver | None = None) -> dict[str, object]:
    """Load the jobs, let the spikes happen, read what they did; the figures. For webhooks,
    ``slow_receiver`` (if any) is the slow jobs' host, and ``args.victim`` adds the victim's
    job."""
    emitter = Emitter(conf.bootstrap, "bench-spike", **{"linger.ms": 50})
    run = uuid.uuid4().hex[:6]
    started = time.monotonic()
    idle = load(emitter, f"idle-{run}", args.idle, "0 0 1 1 *")
    wait_consumed(conf.bootstrap, JOBS, every_s=2)
    spike_ms = plan_spike(args.jobs)
    minutes = [spike_ms + i * 60_000 for i in range(args.minutes)]
    spike = job_ids(f"spike-{run}", args.jobs)
    fast, slow = isolation.split_slow(spike, args.slow_share if receiver else 0.0)
    victim: list[str] = []
    victim_start_ms = spike_ms - VICTIM_LEAD_S * 1000
    figures: dict[str, object] = {}
    if receiver is None:
        produce(emitter, spike, "0 * * * * *", start_ms=spike_ms)
    else:
        produce(emitter, fast, "0 * * * * *", start_ms=spike_ms,
                target=webhook_target(receiver.url), end_ms=minutes[-1])
        if slow:
            assert slow_receiver is not None
            produce(emitter, slow, "0 * * * * *", start_ms=spike_ms,
                    target=webhook_target(slow_receiver.url, args.slow_timeout_s),
                    end_ms=minutes[-1])
            figures["fast jobs"] = f"{len(fast):,} of the spike jobs, to {receiver.url}"
            figures["slow jobs"] = (
                f"{len(slow):,} of the spike jobs ({args.slow_share:.0%}), to "
                f"{slow_receiver.url}, a receiver answering {args.slow_delay_s:g} s after each "
                f"request; their timeout {args.slow_timeout_s:g} s")
        if args.victim:
            # it ends by itself if the benchmark dies before deleting it
            victim = produce(emitter, job_ids(f"victim-{run}", 1), VICTIM_CRON,
                             start_ms=victim_start_ms,
                             target=webhook_target(receiver.url_at(VICTIM_PATH)),
                             end_ms=minutes[-1] + int((RUNS_WAIT_S + QUIET_S) * 1000),
                             tenant=VICTIM_TENANT)
            figures["victim"] = (
                f"tenant {VICTIM_TENANT}, 1 job ({VICTIM_CRON}: every second, from "
                f"{VICTIM_LEAD_S} s before the spike) to {receiver.url_at(VICTIM_PATH)}, the "
                f"spike's receiver; its slots from each spike's second to that spike's last "
                f"arrival")
    produced_s = time.monotonic() - started
    wait_consumed(conf.bootstrap, JOBS, every_s=2)
    loaded_s = time.monotonic() - started
    print(f"loaded {len(idle) + len(spike) + len(victim)} jobs: produced in {produced_s:.1f}s, "
          f"indexed by the workers in {loaded_s:.1f}s; the spike is at {spike_ms} "
          f"({(spike_ms - now_ms()) / 1000:.0f} s from now)", flush=True)
    first_due_ms = victim_start_ms if victim else spike_ms
    if now_ms() > first_due_ms - 2_000:
        stop(emitter, spike, idle, victim)
        raise SystemExit(f"the workers indexed the spike jobs slower than {SPIKE_INDEX_RATE}/s "
                         "and the planned spike has passed; nothing measured (lower --jobs)")

    starts = [TopicPartition(topic, p, o) for topic in (FIRED.name, LEDGER.name)
              for p, o in topic_ends(conf.bootstrap, topic).items()]
    roots = component_pids(stack, workers)
    receivers = [r for r in (receiver, slow_receiver) if r is not None]
    sampler = None
    if receiver is None:
        readings = read_cpu_around(minutes, roots)
    else:
        sampler = CpuSampler(roots | {"receiver": receiver.pid}
                             | ({"slow receiver": slow_receiver.pid} if slow_receiver else {}),
                             start_s=(minutes[0] / 1000 - CPU_WINDOW_S[0] - SAMPLE_S))
    time.sleep(max(0.0, (minutes[-1] - now_ms()) / 1000 + READ_AFTER_S))
    if receiver is not None and sampler is not None:
        hook = receiver

        def spike_requests() -> tuple[int, int]:  # the victim's are counted apart
            counts = [r.count(http_receiver.HOOK) for r in receivers]
            return sum(n for n, _ in counts), max(last for _, last in counts)

        waited = wait_arrivals(spike_requests, args.jobs * args.minutes, minutes[-1],
                               deadline_ms=minutes[-1] + RUNS_WAIT_S * 1000)
        if victim:  # its slots up to the spike's last arrival, some seconds more at most
            last_ns = spike_requests()[1]
            last_ms = last_ns // 1_000_000 if last_ns else minutes[-1]
            due = len(isolation.victim_slots(victim[0], victim_start_ms, last_ms))
            came = wait_arrivals(lambda: hook.count(VICTIM_PATH), due, last_ms,
                                 deadline_ms=now_ms() + int(QUIET_S * 1000))
            print(f"victim: {came} requests ({due} slots due by the spike's last arrival)",
                  flush=True)
        sampler.stop()
        print(f"receivers: {waited} spike requests; reading the ledger", flush=True)
    fired_at, ran_at, outcomes, verdicts = read_spikes(
        conf.bootstrap, starts, f"spike-{run}", minutes, args.jobs,
        deadline_ms=minutes[-1] + RUNS_WAIT_S * 1000)
    pids = [processes.alive(stack.pidfile(name)) for name in workers]
    rss = [rss_peak_mib(pid) for pid in pids if pid]
    stop(emitter, spike, idle, victim)

    figures = {
        "jobs due in the same second": args.jobs,
        "idle schedules loaded": args.idle,
        "load: produce s": round(produced_s, 1),
        "load: indexed by workers s": round(loaded_s, 1),
        "worker peak RSS MiB": rss,
    } | figures
    names = spike_names(len(minutes))
    if receiver is None:
        for name, minute in zip(names, minutes, strict=True):
            figures[name] = spike_figures(fired_at[minute], ran_at[minute], outcomes[minute],
                                          minute, readings[minute])
        return figures
    assert sampler is not None
    logs = [r.stop() for r in receivers]
    assert all(logs), "a receiver wrote no arrivals"
    pairs = [pair for log in logs if log is not None for pair in log.pairs]
    spike_pairs, victim_pairs = apart(pairs, victim[0] if victim else None)
    expected = {fire_id(job_id, minute): minute for minute in minutes for job_id in spike}
    received, others = account(spike_pairs, expected)
    groups = {group: (ids, account(spike_pairs, {fire_id(job_id, minute): minute
                                                 for minute in minutes for job_id in ids})[0])
              for group, ids in ((isolation.FAST, fast), (isolation.SLOW, slow)) if slow}
    figures["requests without a fire id"] = sum(log.without_fire_id for log in logs if log)
    figures["malformed requests"] = sum(log.malformed for log in logs if log)
    figures["arrivals of slots not measured"] = others
    if victim:
        figures["victim arrivals (whole run)"] = len(victim_pairs)
    figures["receiver CPU s (whole run)"] = receiver.final_cpu_s
    if slow_receiver is not None:
        figures["slow receiver CPU s (whole run)"] = slow_receiver.final_cpu_s
    arrived_s = sorted(at / 1e9 for _, at in pairs)  # the victim's runs cost CPU too
    for name, minute in zip(names, minutes, strict=True):
        got = received[minute]
        end_s = got.last_ns / 1e9 if got.last_ns is not None else minute / 1000 + CPU_WINDOW_S[1]
        used = window(sampler.readings, minute / 1000 - CPU_WINDOW_S[0], end_s)
        figures[name] = webhook_figures(got, fired_at[minute], outcomes[minute],
                                        len(verdicts[minute]), minute, used,
                                        runs_between(arrived_s, used), sampler.roots) \
            | isolation_figures(minute, got, groups, verdicts[minute],
                                (victim[0], victim_pairs) if victim else None)
    return figures


def apart(pairs: list[tuple[str, int]], victim_id: str | None
          ) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """The arrivals (fire id, ns) of the spike's jobs, and those of the victim's job."""
    if victim_id is None:
        return pairs, []
    mine = f"{victim_id}@"
    spike, victim = [], []
    for pair in pairs:
        (victim if pair[0].startswith(mine) else spike).append(pair)
    return spike, victim


def isolation_figures(minute: int, got: Received,
                      groups: dict[str, tuple[list[str], dict[int, Received]]],
                      verdicts: dict[str, str],
                      victim: tuple[str, list[tuple[str, int]]] | None) -> dict[str, object]:
    """One spike's isolation figures (``bench.isolation``), to add to its figures: each group of
    its jobs (name -> its job ids and ``account`` of their slots; none without slow jobs) with
    the ledger's word on each of its slots (``verdicts``: fire id -> word), and the victim's
    slots (its job id and its arrivals) from the spike's second to the spike's last arrival
    (``got``: the whole spike's; its nominal second if nothing arrived)."""
    figures: dict[str, object] = {}
    for group, (ids, by_minute) in groups.items():
        of_group = by_minute[minute]
        ledger = isolation.verdict_counts(verdicts, (fire_id(job_id, minute) for job_id in ids))
        figures |= isolation.prefixed(group, isolation.group_figures(
            of_group.slots, of_group.lags_ms, of_group.duplicates, ledger))
    if victim is not None:
        victim_id, arrivals = victim
        end_ms = got.last_ns // 1_000_000 if got.last_ns is not None else minute
        due = isolation.victim_slots(victim_id, minute, end_ms)
        figures |= isolation.prefixed(isolation.VICTIM, isolation.victim_figures(arrivals, due))
    return figures


Readings = list[tuple[float, dict[str, float]]]  # (when, CPU seconds so far per component)


def read_cpu_around(minutes: list[int], roots: dict[str, int]) -> dict[int, Readings]:
    """Timers that read every component's CPU (and the JVMs' JIT compiler threads') from
    ``CPU_WINDOW_S[0]`` before each spike to ``CPU_WINDOW_S[1]`` after it."""
    readings: dict[int, Readings] = {minute: [] for minute in minutes}

    def read(minute: int) -> None:
        used = cpu_seconds(roots) | jit_cpu_seconds(roots)
        readings[minute].append((time.monotonic(), used))

    for minute in minutes:
        for at_s in (-CPU_WINDOW_S[0], CPU_WINDOW_S[1]):
            timer = threading.Timer((minute - now_ms()) / 1000 + at_s, read, (minute,))
            timer.daemon = True
            timer.start()
    return readings


def read_spikes(bootstrap: str, starts: list[TopicPartition], prefix: str, minutes: list[int],
                jobs: int, deadline_ms: int
                ) -> tuple[dict[int, list[int]], dict[int, list[int]], dict[int, dict[str, int]],
                           dict[int, dict[str, str]]]:
    """Per spike: when each of its fired records was produced (CreateTime), when each of its
    ledger records was, the outcomes, and the word of each slot's newest ledger record (fire id
    -> ``bench.isolation.verdict``: one entry per slot with a record); read from ``starts``
    until every spike's runs are in or ``deadline_ms``."""
    by_suffix = {"@" + fire_id("", minute).split("@")[1]: minute for minute in minutes}
    fired_at: dict[int, list[int]] = {minute: [] for minute in minutes}
    ran_at: dict[int, list[int]] = {minute: [] for minute in minutes}
    outcomes: dict[int, dict[str, int]] = {minute: {} for minute in minutes}
    verdicts: dict[int, dict[str, str]] = {minute: {} for minute in minutes}
    consumer = Consumer({**client_config(bootstrap), "group.id": f"bench-{prefix}",
                         "enable.auto.commit": False})
    consumer.assign(starts)  # from where the topics ended before the spikes
    while sum(map(len, ran_at.values())) < jobs * len(minutes) and now_ms() < deadline_ms:
        for msg in consumer.consume(10_000, 1.0):
            key = msg.key().decode() if not msg.error() else ""
            if not key.startswith(prefix):
                continue
            if msg.topic() == FIRED.name:
                nominal = codec().decode(msg.value())["nominal_ms"]
                if nominal in fired_at:
                    fired_at[nominal].append(msg.timestamp()[1])  # CreateTime: when produced
            elif (minute := by_suffix.get(key[key.rfind("@"):])) is not None:
                ran_at[minute].append(msg.timestamp()[1])
                entry = codec().decode(msg.value())
                verdicts[minute][key] = isolation.verdict(entry)
                outcomes[minute][entry["outcome"]] = outcomes[minute].get(entry["outcome"], 0) + 1
    consumer.close()
    return fired_at, ran_at, outcomes, verdicts


def spike_figures(fired_at: list[int], ran_at: list[int], outcomes: dict[str, int],
                  minute: int, readings: Readings) -> dict[str, object]:
    """One spike's figures: fire lag (produced minus nominal) and run lag (ledger minus
    nominal), and where the box's cores went around it."""
    lags = [at - minute for at in fired_at]
    runs = [at - minute for at in ran_at]
    fire_span_s = max(1, max(fired_at) - min(fired_at)) / 1000 if fired_at else float("nan")
    return {
        "fires recorded": len(lags),
        "fires/s (first to last fire)": round(len(lags) / fire_span_s) if lags else 0,
        "fire lag p50 ms": percentile(lags, 50),
        "fire lag p99 ms": percentile(lags, 99),
        "fire lag max ms": max(lags) if lags else None,
        "runs recorded (ledger)": len(runs),
        "run outcomes": outcomes,
        "runs/s (spike to last run)": round(len(runs) / (max(runs) / 1000)) if runs else 0,
        "run lag p50 ms": percentile(runs, 50),
        "run lag p99 ms": percentile(runs, 99),
        "run lag max ms": max(runs) if runs else None,
        f"cores used from {CPU_WINDOW_S[0]:.0f} s before to {CPU_WINDOW_S[1]:.0f} s after":
            cores_between(readings),
    }


@dataclass
class Received:
    """One spike's slots as the receiver saw them."""
    slots: int = 0  # slots due (one per spike job)
    lags_ms: list[int] = field(default_factory=list)  # first arrival minus nominal, per slot received
    duplicates: int = 0  # arrivals after a slot's first
    first_ns: int | None = None  # the earliest of the slots' first arrivals
    last_ns: int | None = None  # the latest of the slots' first arrivals

    @property
    def received(self) -> int:
        return len(self.lags_ms)

    @property
    def missing(self) -> int:
        return self.slots - self.received


def account(pairs: list[tuple[str, int]], expected: dict[str, int]
            ) -> tuple[dict[int, Received], int]:
    """The receiver's arrivals (fire id, ns) against the slots expected (fire id -> nominal ms):
    per nominal time, the run lag of every slot received (its first arrival), the duplicates
    and the span of the arrivals; and the arrivals of slots not expected (``bench.runs``)."""
    by_minute = {minute: Received() for minute in set(expected.values())}
    for minute in expected.values():
        by_minute[minute].slots += 1
    ours = [(fid, at) for fid, at in pairs if fid in expected]
    for fid, n in Counter(fid for fid, _ in ours).items():
        by_minute[expected[fid]].duplicates += n - 1
    for fid, at in first_arrivals(ours).items():
        got = by_minute[expected[fid]]
        got.lags_ms.append(at // 1_000_000 - expected[fid])
        got.first_ns = at if got.first_ns is None else min(got.first_ns, at)
        got.last_ns = at if got.last_ns is None else max(got.last_ns, at)
    return by_minute, len(pairs) - len(ours)


class CpuSampler:
    """Every component's CPU seconds read every ``SAMPLE_S`` from ``start_s`` (wall clock) until
    ``stop``: a webhook spike's drain lasts as long as it lasts, so its window is chosen after
    it (``window``)."""

    def __init__(self, roots: dict[str, int], start_s: float,
                 read: Callable[[dict[str, int]], dict[str, float]] | None = None) -> None:
        self.roots = roots
        self.readings: Readings = []
        self._read = read or (lambda roots: cpu_seconds(roots) | jit_cpu_seconds(roots))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(start_s,), daemon=True)
        self._thread.start()

    def _run(self, start_s: float) -> None:
        if self._stop.wait(max(0.0, start_s - time.time())):
            return
        while True:
            self.readings.append((time.time(), self._read(self.roots)))
            if self._stop.wait(SAMPLE_S):
                break

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.readings.append((time.time(), self._read(self.roots)))


def window(readings: Readings, start_s: float, end_s: float) -> Readings:
    """The last reading at or before ``start_s`` and the first at or after ``end_s`` (the
    last one if none is): the narrowest sampled window holding [start_s, end_s]; empty if no
    reading came before ``start_s``."""
    before = [reading for reading in readings if reading[0] <= start_s]
    after = [reading for reading in readings if reading[0] >= end_s] or readings[-1:]
    if not before or not after:
        return []
    return [before[-1], after[0]]


def runs_between(arrived_s: list[float], used: Readings) -> int:
    """Arrivals (sorted, seconds) inside a window's two readings: the runs its CPU paid for,
    whichever spike they were of."""
    if len(used) != 2:
        return 0
    return sum(1 for at in arrived_s if used[0][0] <= at <= used[1][0])


def wait_arrivals(count: Callable[[], tuple[int, int]], expected: int, last_minute_ms: int,
                  deadline_ms: int, clock: Callable[[], int] = now_ms,
                  sleep: Callable[[float], None] = time.sleep) -> int:
    """Wait until the receiver has ``expected`` requests, or none came for ``QUIET_S`` since
    the last one (or since the last spike, if none came), or ``deadline_ms``; returns the
    requests. ``count`` is ``Receiver.count``; ``clock`` and ``sleep`` are for tests."""
    while True:
        requests, last_ns = count()
        quiet_since = max(last_ns // 1_000_000, last_minute_ms)
        if requests >= expected or clock() - quiet_since > QUIET_S * 1000 or clock() > deadline_ms:
            return requests
        sleep(1.0)


def webhook_figures(got: Received, fired_at: list[int], outcomes: dict[str, int],
                    ledger_slots: int, minute: int, used: Readings, runs_in_window: int,
                    roots: dict[str, int]) -> dict[str, object]:
    """One webhook spike's figures: what its users saw first (run lag: arrival minus nominal;
    every slot received once; the ledger's word on every slot), fire lag second, and where the
    box's cores went from a second before it to its last arrival."""
    span_s = max(1, (got.last_ns or 0) - (got.first_ns or 0)) / 1e9
    due_to_last_s = ((got.last_ns or 0) - minute * 1_000_000) / 1e9
    lags = [at - minute for at in fired_at]
    fire_span_s = max(1, max(fired_at) - min(fired_at)) / 1000 if fired_at else float("nan")
    figures: dict[str, object] = {
        "slots due": got.slots,
        "received (distinct slots)": got.received,
        "missing (never received)": got.missing,
        "duplicates received": got.duplicates,
        "runs/s (first to last arrival)": round(got.received / span_s) if got.received else 0,
        "runs/s (due to last arrival)": round(got.received / due_to_last_s)
        if got.received and due_to_last_s > 0 else None,
        "run lag p50 ms (arrival - nominal)": percentile(got.lags_ms, 50),
        "run lag p99 ms": percentile(got.lags_ms, 99),
        "run lag max ms": max(got.lags_ms) if got.lags_ms else None,
        "ledger outcomes": outcomes,
        "slots without a ledger outcome": got.slots - ledger_slots,
        "fires recorded": len(lags),
        "fires/s (first to last fire)": round(len(lags) / fire_span_s) if lags else 0,
        "fire lag p50 ms": percentile(lags, 50),
        "fire lag p99 ms": percentile(lags, 99),
        "fire lag max ms": max(lags) if lags else None,
    }
    cores = cores_between(used)
    figures[f"cores used from {CPU_WINDOW_S[0]:.0f} s before to its last arrival"] = cores
    figures["CPU ms per run (window's CPU / arrivals in it)"] = \
        cpu_per_run(used, runs_in_window, roots) if cores else None
    return figures


NOT_CRONSTREAM = ("receiver", "slow receiver", "benchmark")  # the processes that serve the spike


def cpu_per_run(used: Readings, runs: int, roots: dict[str, int]) -> dict[str, float] | None:
    """CPU ms per run over a window: each component's, the whole box's, and cronstream's own
    (the whole box less the receivers and the benchmark); the JIT compiler threads are part of
    their JVM's figure and not added again."""
    if len(used) != 2 or not runs:
        return None
    (_, first), (_, last) = sorted(used, key=lambda reading: reading[0])
    spent = {name: last[name] - first.get(name, 0.0) for name in roots}
    per_run = {name: round(cpu / runs * 1000, 3) for name, cpu in spent.items()}
    per_run["whole box"] = round(sum(spent.values()) / runs * 1000, 3)
    per_run["cronstream (no receiver, no benchmark)"] = round(sum(
        cpu for name, cpu in spent.items() if name not in NOT_CRONSTREAM) / runs * 1000, 3)
    return per_run


def cores_between(readings: Readings) -> dict[str, float] | None:
    """Each component's cores between the two readings, over the time that really passed
    between them (a reading taken late must not inflate or shrink the figure)."""
    if len(readings) != 2:
        return None
    (first_at, first), (last_at, last) = sorted(readings, key=lambda reading: reading[0])
    return cpu_share(first, last, last_at - first_at)


def stop(emitter: Emitter, *groups: list[str]) -> None:
    """Delete the benchmark's jobs (tombstones), once the broker has them."""
    for ids in groups:
        for job_id in ids:
            emitter.produce(JOBS, job_id, None)
    left = emitter.flush(120)
    if left:
        print(f"warning: {left} of the job deletions not acknowledged by the broker in 120 s; "
              "the next run's load waits for the rest", flush=True)


if __name__ == "__main__":
    main()
