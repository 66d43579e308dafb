"""Failover: SIGKILL a worker while jobs fire every second; time until its partitions fire again.

    .venv/bin/python -m bench.failover [--jobs 1000] [--idle 0] [--workers 2] [--after-s 60]

Runs on the real local stack (started if needed). N jobs due every second (``* * * * * *``,
misfire policy ``fire_all`` so nothing may be skipped) are written straight to the jobs topic and
fire on ``--workers`` workers, beside ``--idle`` idle schedules (``0 0 1 1 *``, the spike
benchmark's: ``--idle 1100000`` is a takeover at the spike's scale, where the survivor must hold
the dead worker's share of a million jobs before it can fire them). After a warm-up the last
worker is SIGKILLed; for each partition it held, the gap is the time from the kill to the first
fired record (its CreateTime) produced for that partition afterwards, and for every job on those
partitions, the time to its first fired record (the worst job is the takeover's real cost).
Slots missed: every (job, second) between the kill minus 10 s and the
kill plus ``--after-s`` must end up with a decision in ``cronstream.ledger`` once the executors
have consumed every fired record (the time that takes is reported: a backlog means the executors
run slower than the jobs fire) and the reconciler has had its turn; the count of those without
one must be 0. The killed worker is restarted once the report is printed. Target (issue 42):
its partitions fire again within 5 s (goal 3 s).

``--spike N`` kills the worker in the middle of a top-of-minute spike instead: N more jobs, due
together once (at a minute boundary planned as ``bench.spike`` plans its spike), and the kill
``--kill-into-spike-ms`` after that second began, while the victim is still deciding its share.
Every spike slot must end up with a decision too, and once; the report gives how long the
slots of the killed worker's partitions took to be fired, by the victim before the kill or by
the survivor after it, and when the last spike slot was decided (the benchmark waits for it, up
to ``SPIKE_DECIDED_TIMEOUT_S``, and deletes the idle and spike jobs only after measuring).
They are ``fire_all`` jobs, as the ones firing every second: the slots the victim had not fired
are late by the takeover, and a ``skip`` job's would be skipped (its policy for a slot over 5 s
late), so the survivor catches them up instead, in turns (``streams.scheduling.catch_up``).
Fewer jobs firing every second suit it (``--jobs 100``): one survivor runs about a thousand
slots a second, and the spike's runs queue behind them.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
import uuid

from confluent_kafka import Consumer, TopicPartition

from bench.common import (
    count_at_least,
    report,
    stack_with_workers,
    topic_ends,
    wait_consumed,
    wait_standbys,
)
from bench.spike import job, load, plan_spike, stop
from stack import processes
from stack.local import Stack
from streams.runtime import clock
from streams.runtime.emit import Emitter
from streams.runtime.kafka_config import client_config
from streams.scheduling import schedule
from streams.topology import FIRED, JOBS, LEDGER, partition_for

WARM_UP_S = 20
SETTLE_S = 20  # the reconciler's turn once the executors have consumed every fired record
SPIKE_DECIDED_TIMEOUT_S = 900  # the most the spike's slots are waited for
RESTART_READY_S = 900  # the killed worker restarted at the end, beside a million jobs


def held_partitions(stack: Stack, worker: str) -> set[int]:
    """The partitions a worker reported at its last recovery (its ready file)."""
    text = (stack.s.run_dir / f"{worker}.ready").read_text()
    return {int(p) for p in text.split(" ", 1)[1].strip(" []\n").split(",") if p.strip()}


def read(bootstrap: str, topic: str, start: dict[int, int], prefix: str,
         until: dict[int, int]) -> list[tuple[str, int, int]]:
    """(key, partition, CreateTime) of every record of ``topic`` between two offset maps whose
    key starts with ``prefix``."""
    consumer = Consumer({**client_config(bootstrap), "group.id": f"bench-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, o) for p, o in start.items()])
    left = {p for p in start if until[p] > start[p]}
    found: list[tuple[str, int, int]] = []
    while left:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error():
                continue
            if msg.offset() >= until[msg.partition()] - 1:
                left.discard(msg.partition())
            if msg.offset() < until[msg.partition()] and msg.key().decode().startswith(prefix):
                found.append((msg.key().decode(), msg.partition(), msg.timestamp()[1]))
    consumer.close()
    return found


def once_at(ms: int) -> str:
    """A cron expression (with seconds, UTC) due at ``ms`` and not again within the year."""
    at = time.gmtime(ms // 1000)
    return f"{at.tm_sec} {at.tm_min} {at.tm_hour} {at.tm_mday} {at.tm_mon} *"


def spike_figures(spike: list[str], spike_ms: int, killed_ms: int,
                  fired: list[tuple[str, int, int]], victim_parts: set[int],
                  count: int) -> dict[str, object]:
    """When the spike's slots on the killed worker's partitions were first fired (the CreateTime
    of each one's first fired record), by the victim before the kill or after it. A spike job
    has one slot, so its fired records (keyed by job id) are all that slot's."""
    slots = {j for j in spike if partition_for(j, count) in victim_parts}
    first: dict[str, int] = {}
    for key, _, ts in fired:
        if key in slots and ts < first.get(key, 1 << 62):
            first[key] = ts
    after = [ts for ts in first.values() if ts >= killed_ms]
    return {
        "jobs due in the spike's second": len(spike),
        "of them on the killed worker's partitions": len(slots),
        "fired by it before the kill": len(first) - len(after),
        "fired after the kill": len(after),
        "never fired": len(slots) - len(first),
        "last of them fired, s after the spike": (
            round((max(first.values()) - spike_ms) / 1000, 1) if first else None),
    }


def decision_figures(slots: set[str], killed_ms: int,
                     ledger: list[tuple[str, int, int]]) -> dict[str, object]:
    """Whether each of ``slots`` (fire ids) was decided, and once: from their ledger records
    (key, partition, CreateTime), and when the last one was first decided."""
    first: dict[str, int] = {}
    records: dict[str, int] = {}
    for key, _, ts in ledger:
        if key in slots:
            records[key] = records.get(key, 0) + 1
            first[key] = min(ts, first.get(key, ts))
    return {
        "slots without a decision (missed)": len(slots - set(first)),
        "slots decided more than once": sum(n > 1 for n in records.values()),
        "every slot decided, s after the kill": (
            round((max(first.values()) - killed_ms) / 1000, 1)
            if first and len(first) == len(slots) else None),
    }


def wait_decided(bootstrap: str, start: dict[int, int], slots: set[str],
                 timeout_s: float = SPIKE_DECIDED_TIMEOUT_S) -> None:
    """Until every one of ``slots`` (fire ids) has a record in the ledger written after
    ``start``, or ``timeout_s`` (the report then counts what is missing)."""
    left, at = set(slots), dict(start)
    deadline = time.monotonic() + timeout_s
    prefix = os.path.commonprefix(sorted(slots)) if slots else ""
    while left and time.monotonic() < deadline:
        ends = topic_ends(bootstrap, LEDGER.name)
        left -= {key for key, _, _ in read(bootstrap, LEDGER.name, at, prefix, ends)}
        at = ends
        if left:
            time.sleep(2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=count_at_least(1), default=1000)
    parser.add_argument("--idle", type=count_at_least(0), default=0)
    parser.add_argument("--workers", type=count_at_least(2), default=2)
    parser.add_argument("--after-s", type=count_at_least(1), default=60)
    parser.add_argument("--spike", type=count_at_least(0), default=0,
                        help="jobs due together once; the worker is killed during their second")
    parser.add_argument("--kill-into-spike-ms", type=count_at_least(0), default=250)
    args = parser.parse_args()

    conf, stack, workers = stack_with_workers(args.workers)
    victim = workers[-1]
    emitter = Emitter(conf.bootstrap, "bench-failover", **{"linger.ms": 50})
    run = uuid.uuid4().hex[:6]
    prefix = f"failover-{run}"
    idle = load(emitter, f"idle-{run}", args.idle, "0 0 1 1 *")
    # the firing jobs are owed every slot from their creation: created while a million idle ones
    # were still being indexed, they would start with minutes of catch-up
    wait_consumed(conf.bootstrap, JOBS, every_s=2)
    now = clock.now_ms()
    ids = [f"{prefix}-{i:06d}" for i in range(args.jobs)]
    for job_id in ids:
        emitter.produce(JOBS, job_id, job(job_id, "* * * * * *", now, "fire_all", 600))
    emitter.flush(60)
    spike_ms = plan_spike(args.spike) if args.spike else None
    spike = [] if spike_ms is None else load(emitter, f"{prefix}-spike", args.spike,
                                             once_at(spike_ms), spike_ms, "fire_all", 600)
    wait_consumed(conf.bootstrap, JOBS)  # an earlier run's tombstones come first
    # a standby reads its changelogs after the worker's own partitions: just after a million
    # jobs were loaded it trails by tens of thousands of records, which a takeover replays
    standby_s = wait_standbys(conf, workers)
    print(f"standbys current {standby_s:.0f} s after the jobs were consumed", flush=True)
    fired_start, ledger_start = topic_ends(conf.bootstrap, FIRED.name), topic_ends(
        conf.bootstrap, LEDGER.name)
    if spike_ms is None:
        time.sleep(WARM_UP_S)
    else:
        kill_at = spike_ms + args.kill_into_spike_ms
        if clock.now_ms() > kill_at - WARM_UP_S * 1000:
            stop(emitter, ids, idle, spike)
            raise SystemExit("the jobs took longer to index than planned and the spike is less "
                             f"than {WARM_UP_S} s away or past; nothing measured (lower --spike)")
        print(f"the spike is at {spike_ms}; the kill {args.kill_into_spike_ms} ms into it",
              flush=True)
        time.sleep((kill_at - clock.now_ms()) / 1000)

    victim_parts = held_partitions(stack, victim)
    pid = processes.alive(stack.pidfile(victim))
    assert pid is not None
    killed_ms = clock.now_ms()
    os.kill(pid, signal.SIGKILL)
    print(f"SIGKILLed {victim} (partitions {sorted(victim_parts)}) at {killed_ms}", flush=True)
    time.sleep(args.after_s)
    window = (killed_ms // 1000 * 1000 - 10_000, killed_ms + args.after_s * 1000)

    stop(emitter, ids)  # the window ends; then the reconciler settles what is pending
    spike_slots = set() if spike_ms is None else {schedule.fire_id(j, spike_ms) for j in spike}
    if spike_slots:  # still being caught up and run
        wait_decided(conf.bootstrap, ledger_start, spike_slots)
    backlog_s = wait_consumed(conf.bootstrap, FIRED, every_s=2)  # executors working it off
    time.sleep(SETTLE_S)
    fired = read(conf.bootstrap, FIRED.name, fired_start, prefix,
                 topic_ends(conf.bootstrap, FIRED.name))
    ledger = read(conf.bootstrap, LEDGER.name, ledger_start, prefix,
                  topic_ends(conf.bootstrap, LEDGER.name))
    decided = {key for key, _, _ in ledger}
    # the idle and spike jobs go only now: a million tombstones are a bulk load of their own, and
    # applied while the spike's runs drained they took the survivor's event loop from its executor
    stop(emitter, idle, spike)

    count = conf.partitions
    gaps = {}
    for part in sorted(victim_parts):
        after = [ts for key, p, ts in fired if p == part and ts > killed_ms]
        gaps[part] = round((min(after) - killed_ms) / 1000, 1) if after else None
    # a partition fires again with its first record; every job on it, with the last job's first
    first_after: dict[str, int] = {}
    for key, part, ts in fired:
        job_id = key.split("@", 1)[0]
        if part in victim_parts and ts > killed_ms and ts < first_after.get(job_id, 1 << 62):
            first_after[job_id] = ts
    moved = [j for j in ids if partition_for(j, count) in victim_parts]
    every_job_s = (round((max(first_after[j] for j in moved) - killed_ms) / 1000, 1)
                   if moved and all(j in first_after for j in moved) else None)
    expected = {schedule.fire_id(job_id, second) for job_id in ids
                for second in range(window[0], window[1] - 5_000, 1000)}
    missed = expected - decided
    per_part = {p: sum(1 for j in ids if partition_for(j, count) == p) for p in victim_parts}
    figures: dict[str, object] = {
        "jobs firing every second": args.jobs,
        "idle schedules loaded": args.idle,
        "killed worker's partitions": sorted(victim_parts),
        "jobs on them": sum(per_part.values()),
        "time to fire again per partition s": gaps,
        "time to fire again (worst partition) s":
            max((g for g in gaps.values() if g is not None), default=None),
        "time until every job on them fired again s": every_job_s,
        "partitions never fired again": [p for p, g in gaps.items() if g is None],
        "standbys current after the load s": round(standby_s),
        "slots in the window": len(expected),
        "slots without a decision (missed)": len(missed),
        "executor backlog after the window s": round(backlog_s, 1),
    }
    if spike_ms is not None:
        figures["spike"] = {**spike_figures(spike, spike_ms, killed_ms, fired, victim_parts, count),
                            **decision_figures(spike_slots, killed_ms, ledger)}
    report("failover", figures, {"jobs": args.jobs, "idle": args.idle, "workers": args.workers,
                                 "after_s": args.after_s, "spike": args.spike,
                                 "kill_into_spike_ms": args.kill_into_spike_ms})
    if missed or spike_slots - decided:
        print(f"  e.g. missed: {sorted(missed | (spike_slots - decided))[:5]}")
    # after the report: a victim with no warm index of what it owned reads its share again
    # (543k jobs in 50 s beside 1.1M idle), longer than a worker's usual 60 s to be ready
    stack.start_worker(victim, ready_timeout_s=RESTART_READY_S)


if __name__ == "__main__":
    main()
