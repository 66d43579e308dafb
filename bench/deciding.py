"""CPU to decide one prepared slot in a spike's second: the scheduler's own cost, no broker.

    .venv/bin/python -m bench.deciding [--slots 50000] [--partitions 4]

What a worker does at the top of a minute, without the stack around it: ``--slots`` jobs
(as ``bench.spike`` writes them) indexed over ``--partitions`` partitions and
prepared ahead as ``ScheduleState._prepare`` does (``slots.prepare``; the jobs are not read
from a table but decoded here), then, once their slot has come, ``fire_due`` run until nothing is due.
The fired records go to a librdkafka producer whose broker does not exist, so they are queued
and never sent: the figure is the deciding thread's CPU per slot (``time.thread_time``), the
part of a spike's fire lag that is the scheduler's alone. ``bench.spike`` measures the rest.
"""

from __future__ import annotations

import argparse
import gc
import time

from bench.common import count_at_least, report
from bench.spike import job
from streams.runtime.clock import now_ms
from streams.runtime.codec import codec
from streams.runtime.emit import Emitter
from streams.scheduling import deciding
from streams.scheduling.due_index import DueIndex
from streams.scheduling.slots import prepare

NOWHERE = "127.0.0.1:1"  # no broker: produced records are queued, never sent
# the jobs' expression: its following slot is months away, so nothing gets staged and
# prepared (which reads the jobs table) while the slot is measured; the measured slot itself
# is any second, as a preparation does not check that its slot matches the expression
YEARLY = "0 0 0 1 1 *"
SETUP_S_PER_SLOT = 0.0002  # time to build one preparation here, to set the slot ahead of it


class NoJobs:
    """The jobs table: never read, as every slot is prepared before it is measured."""

    def get_in(self, partition: int, key: bytes) -> bytes | None:
        raise AssertionError("a prepared slot's job is not read again")

    def items_in(self, partition: int) -> list[tuple[bytes, bytes]]:
        return []


class NothingRuns:
    """The executor's side (``streams.handoff.Runs``): nothing done, nothing running."""

    def done_mark(self, partition: int, fid: str) -> bytes | None:
        return None

    def in_flight_ids(self) -> set[str]:
        return set()

    def queues(self, ends: dict[int, int]) -> dict:
        return {}


def prepared_state(slots: int, partitions: int, slot: int) -> deciding.ScheduleState:
    """A worker's schedule state with ``slots`` jobs due at ``slot``, every one prepared."""
    state = deciding.ScheduleState(NoJobs(), NothingRuns())
    state._emitter = Emitter(NOWHERE, "bench-deciding", **{
        "queue.buffering.max.messages": max(1_000_000, slots), "log_level": 0})
    for part in range(partitions):
        state.partitions.indexes[part] = DueIndex()
    for i in range(slots):
        j = codec().decode(job(f"deciding-{i:07d}", YEARLY, now_ms()))
        index = state.partitions.indexes[i % partitions]
        index.set(j["job_id"], slot)
        index.stage(slot, 1)
        index.attach(j["job_id"], prepare(j, slot, done=False))
    return state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=count_at_least(1), default=50_000)
    parser.add_argument("--partitions", type=count_at_least(1), default=4)
    args = parser.parse_args()

    slot = (now_ms() // 1000 + 5 + int(args.slots * SETUP_S_PER_SLOT)) * 1000
    state = prepared_state(args.slots, args.partitions, slot)
    if now_ms() >= slot:
        raise SystemExit("preparing took longer than planned and the slot has passed; "
                         "nothing measured (lower --slots)")
    time.sleep((slot - now_ms()) / 1000 + 0.005)
    gc.disable()  # as in a burst (streams.scheduling.agents.collections_deferred)
    cpu, wall = time.thread_time(), time.monotonic()
    while state.fire_due():
        pass
    cpu, wall = time.thread_time() - cpu, time.monotonic() - wall
    gc.enable()
    state.count()
    report("deciding", {
        "slots decided": state.decided,
        "slots fired": len(state.reconciler.pending),
        "deciding thread CPU s": round(cpu, 3),
        "CPU per slot us": round(cpu / max(state.decided, 1) * 1e6, 2),
        "wall s": round(wall, 3),
    }, {"slots": args.slots, "partitions": args.partitions})


if __name__ == "__main__":
    main()
