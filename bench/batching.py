"""The broker's CPU for a spike's fired records, by how long the producers linger.

    .venv/bin/python -m bench.batching [--lingers 5,50] [--rounds 5] [--records 50000]

Why: in a spike's own second the broker shares the two cores with the workers deciding, so
what it spends on their records is fire lag. Two producer processes (the two workers) each send
``--records`` fired records, encoded as the scheduler encodes them, at a spike's pace
(``--rate`` a second each, in rounds of ``FIRE_ROUND``) into a scratch topic with the fired
topic's partitions, through ``streams.runtime.emit.Emitter`` with ``linger.ms`` set to each of
``--lingers`` in turn, each burst into a topic of its own. The figure is the broker's CPU
(user + system, ``/proc``) from just before the first record to the last acknowledgement. The
lingers alternate over ``--rounds`` so the broker's JIT warming up through the run does not
favour the later ones; the first round on a fresh broker is its cold case. Runs on the local
stack (started if needed, no workers); the scratch topics are deleted afterwards.
``streams.scheduling.emission.FIRED_LINGER_MS`` comes from here.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
import uuid
from dataclasses import replace
from multiprocessing.queues import Queue

from confluent_kafka.admin import NewTopic

from bench.common import count_at_least, cpu_seconds, report
from bench.spike import job
from stack import processes
from stack.local import Stack
from streams.runtime import settings
from streams.runtime.admin import client as admin_client
from streams.runtime.clock import now_ms
from streams.runtime.codec import codec
from streams.runtime.emit import Emitter
from streams.scheduling.deciding import FIRE_ROUND
from streams.scheduling.schedule import fire_id
from streams.scheduling.slots import fired_frozen, fired_template
from streams.topology import FIRED

PRODUCERS = 2  # the spike's two workers
START_AFTER_S = 5.0  # time the producer processes get to start and encode before the burst
SETTLE_S = 5.0  # time the broker gets to create the scratch topics' logs before the first burst


def records(count: int) -> list[tuple[str, bytes]]:
    """``count`` fired records as the scheduler's spike lane writes them (keyed by job id)."""
    slot = now_ms() // 1000 * 1000
    out = []
    for i in range(count):
        j = codec().decode(job(f"batching-{uuid.uuid4().hex[:8]}-{i:07d}", "0 * * * * *", slot))
        frozen = fired_frozen(j, fire_id(j["job_id"], slot), slot)
        out.append((j["job_id"], fired_template().fill(frozen, {
            "fired_ms": slot + 300, "decision": "fired", "epoch": 1})))
    return out


def produce(bootstrap: str, topic: str, linger_ms: int, count: int, rate: int, start: float,
            done: Queue) -> None:
    """One worker's burst: rounds of the scheduler's size, paced to ``rate``, then a flush."""
    spec = replace(FIRED, name=topic)
    batch = records(count)
    emitter = Emitter(bootstrap, f"bench-batching-{linger_ms}", **{"linger.ms": linger_ms})
    while time.time() < start:
        time.sleep(0.001)
    cpu, began = time.process_time(), time.monotonic()
    for n, at in enumerate(range(0, count, FIRE_ROUND)):
        emitter.produce_all(spec, batch[at:at + FIRE_ROUND])
        ahead = began + (n + 1) * FIRE_ROUND / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    emitter.flush(60)
    done.put((time.monotonic() - began, time.process_time() - cpu))
    emitter.close()


def burst(bootstrap: str, topic: str, broker: int, linger_ms: int, count: int, rate: int
          ) -> dict[str, float]:
    spawn = multiprocessing.get_context("spawn")  # no librdkafka threads inherited
    done: Queue = spawn.Queue()
    start = time.time() + START_AFTER_S
    procs = [spawn.Process(target=produce, args=(bootstrap, topic, linger_ms, count, rate, start,
                                                 done))
             for _ in range(PRODUCERS)]
    for proc in procs:
        proc.start()
    while time.time() < start - 0.05:
        time.sleep(0.005)
    before = cpu_seconds({"kafka": broker})["kafka"]
    producers = [done.get(timeout=300) for _ in procs]
    after = cpu_seconds({"kafka": broker})["kafka"]
    for proc in procs:
        proc.join()
    return {"broker CPU s": round(after - before, 3),
            "producers' wall s": round(max(wall for wall, _ in producers), 3),
            "producers' CPU s": round(sum(cpu for _, cpu in producers), 3)}


def scratch_topics(bootstrap: str, count: int, partitions: int) -> list[str]:
    """One new topic per burst, all created before the first: a topic's creation (its log
    directories and index files) or deletion inside a burst's window would be counted in it."""
    names = [f"bench.batching-{uuid.uuid4().hex[:8]}" for _ in range(count)]
    created = admin_client(bootstrap).create_topics(
        [NewTopic(name, FIRED.count(partitions), 1) for name in names])
    for future in created.values():
        future.result()
    time.sleep(SETTLE_S)
    return names


def lingers(text: str) -> list[int]:
    """``--lingers``: distinct linger.ms values, comma-separated, each 0 or more."""
    try:
        values = [int(value) for value in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not comma-separated whole milliseconds (e.g. 5,50)") from None
    if any(value < 0 for value in values) or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{text!r}: each linger once, none negative")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lingers", type=lingers, default=[5, 50],
                        help="linger.ms values to compare, comma-separated (default 5,50)")
    parser.add_argument("--rounds", type=count_at_least(1), default=5)
    parser.add_argument("--records", type=count_at_least(1), default=50_000,
                        help="fired records per producer (a worker's share of a 100k spike)")
    parser.add_argument("--rate", type=count_at_least(1), default=100_000,
                        help="records a second per producer (a worker's deciding pace)")
    args = parser.parse_args()
    conf = settings.load()
    stack = Stack(conf)
    stack.up(with_app=False)
    broker = processes.alive(stack.pidfile("kafka"))
    if broker is None:
        raise SystemExit(f"the broker is not running after the stack started: see "
                         f"{stack.log('kafka')}")
    runs: dict[int, list[dict[str, float]]] = {linger: [] for linger in args.lingers}
    topics = scratch_topics(conf.bootstrap, args.rounds * len(args.lingers), conf.partitions)
    try:
        for round_ in range(args.rounds):
            for i, linger in enumerate(args.lingers):
                topic = topics[round_ * len(args.lingers) + i]
                runs[linger].append(burst(conf.bootstrap, topic, broker, linger, args.records,
                                          args.rate))
    finally:
        admin_client(conf.bootstrap).delete_topics(topics)
    report("batching", {
        f"linger {linger} ms": {
            "broker CPU s, each round": [run["broker CPU s"] for run in rounds],
            "broker CPU s, median": statistics.median(run["broker CPU s"] for run in rounds),
            "producers' wall s, median": statistics.median(r["producers' wall s"] for r in rounds),
            "producers' CPU s, median": statistics.median(r["producers' CPU s"] for r in rounds),
        } for linger, rounds in runs.items()
    }, {"lingers": args.lingers, "rounds": args.rounds, "records": args.records, "rate": args.rate,
        "producers": PRODUCERS})


if __name__ == "__main__":
    main()
