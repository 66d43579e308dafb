"""The schedule stream's sub-topology: its agents and punctuators on a worker's app.

Graph (names from ``streams.topology``)::

    cronstream.jobs ─▶ reader ─▶ [apply_jobs] ──▶ table jobs (RocksDB + changelog, in batches)
                                     │             └─▶ per-partition DueIndex (rebuilt on recovery)
    cronstream.job-commands ─▶ [apply_job_commands]  (trigger, backfill)
    the executor, in-process ─▶ slot_decided          (resolves the reconciler's pending slot;
                                                      deletes a completed job that asked to be)

    punctuator fire_due (50 ms)  ─┬─▶ cronstream.fired   slots to run (+ reconciler pending)
                                  ├─▶ cronstream.ledger  slots decided without running
                                  └─▶ cronstream.scheduler-progress  fired-through marks (1 s)
    punctuator reconcile (5 s)   ──▶ cronstream.fired (re-drive) / cronstream.ledger (expire)

The deciding itself is ``ScheduleState``'s (``streams.scheduling.deciding``), the applying of the
job definitions ``JobApplier``'s (``streams.scheduling.applying``); these are thin:
they read events, hold the burst gate (``streams.handoff.Gate``) and call the state.
``register`` puts the sub-topology on a worker's app (``streams.worker`` calls it); nothing
happens at import.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from streams.handoff import Gate, Runs
from streams.runtime import admin, metrics, standbys
from streams.runtime.app import Runtime
from streams.runtime.codec import codec
from streams.runtime.emit import Emitter
from streams.runtime.partition_reader import PartitionReader
from streams.scheduling.applying import JobApplier
from streams.scheduling.deciding import ScheduleState
from streams.scheduling.imports import ImportWindow
from streams.topology import (
    APP_ID,
    FIRED,
    JOB_COMMANDS,
    JOBS,
    JOBS_TABLE,
    OWNED,
)

log = logging.getLogger(__name__)

FIRE_TICK_S = 0.05  # the deciding punctuator's interval
# job records applied in one turn of the event loop at most: about 20 ms of it at ~40 µs a record
# (decode, the next slot's search, the index), so the punctuators keep their tick while a million
# jobs are imported
APPLY_BATCH = 500


class Burst:
    """Where a burst's time went: its wall time against the CPU of the whole process, of the
    deciding thread, and of the deciding rounds alone. The thread's CPU outside the rounds is
    the rest of the event loop (faust handing over fetched records); wall time beyond the
    process's CPU is time the box's other processes had the cores."""

    def __init__(self, decided: int, reached_at_due: int) -> None:
        self.decided, self.reached_at_due = decided, reached_at_due
        self.wall, self.process, self.thread = time.monotonic(), time.process_time(), time.thread_time()
        self.in_rounds = 0.0

    def round(self, decide: Callable[[], bool]) -> bool:
        started = time.thread_time()
        try:
            return decide()
        finally:
            self.in_rounds += time.thread_time() - started

    def report(self, decided: int, reached_at_due: int) -> str:
        return (f"{decided - self.decided} slots decided ({reached_at_due - self.reached_at_due} "
                f"not prepared ahead) in {time.monotonic() - self.wall:.3f} s "
                f"wall; CPU: process {time.process_time() - self.process:.3f} s, deciding thread "
                f"{time.thread_time() - self.thread:.3f} s, its deciding rounds "
                f"{self.in_rounds:.3f} s")


def register(rt: Runtime, runs: Runs, deciding: Gate, window: ImportWindow) -> ScheduleState:
    """The schedule stream's sub-topology on ``rt``'s app: the jobs table and its agents, and the
    punctuators that decide due slots and reconcile; ``runs`` is the executor's side of it,
    ``deciding`` the gate it holds while it decides a burst (``streams.handoff.Gate``),
    and ``window`` the bulk importer's, given back as its copies are applied."""
    app, health, region = rt.app, rt.health, rt.region
    commands_topic = rt.topic(JOB_COMMANDS)
    jobs_table = rt.table(JOBS_TABLE)
    state = ScheduleState(jobs_table, runs, bootstrap=rt.settings.bootstrap, worker_id=rt.worker_id,
                          reconciler_lag_ms=int(rt.settings.reconciler_lag_s * 1000))
    changelog = next(t for t in admin.changelog_topics() if t.name == JOBS_TABLE.changelog(APP_ID))
    reader = PartitionReader(rt.settings.bootstrap, f"jobs-{rt.worker_id}", JOBS,
                             batch=APPLY_BATCH, handed_at_most=2)
    applier = JobApplier(jobs_table, Emitter(rt.settings.bootstrap, f"jobs-{rt.worker_id}"),
                         changelog, reader, state.partitions, window)

    @jobs_table.on_recover
    async def _on_jobs_recovered() -> None:
        state.generation = app.consumer_generation_id
        state.under_region(region.holds() or 0)
        assigned = {tp.partition for tp in app.consumer.assignment() if tp.topic == OWNED.name}
        changelog = JOBS_TABLE.changelog(APP_ID)
        standby_parts = {tp.partition for tp in app.assignor.assigned_standbys()
                         if tp.topic == changelog}
        gc.collect()  # the garbage of the heap the last recovery left, before it is frozen
        with collections_deferred(freeze=True):  # its indexes (millions of objects) never walked
            state.rebuild(assigned, standby_parts)
        health.recovered, health.partitions = True, sorted(assigned)
        metrics.REBALANCES.inc()
        metrics.ASSIGNED.set(len(assigned))
        ready = rt.ready_file()
        ready.parent.mkdir(parents=True, exist_ok=True)
        ready.write_text(f"{state.epoch} {sorted(assigned)}\n")
        reader.start(asyncio.get_running_loop(), applier.deliver)  # the first time only
        applier.assign(assigned)  # their job definitions from their commit on

    jobs_table.on_applied = state.partitions.apply_changelog

    @app.timer(interval=0.1, name=f"{__name__}.warm_up_standbys")
    async def warm_up_standbys() -> None:
        """Punctuator: read what a standby partition's RocksDB held before it became a standby
        into its warm index, a step at a time (``streams.scheduling.warm_index``), never during
        a burst; and export how far the standbys trail their changelogs."""
        if deciding.is_open:
            state.partitions.warm_up()
        try:  # a gauge: an exception in a faust timer stops the whole worker
            for changelog, records in standbys.behind(app).items():
                metrics.STANDBY_BEHIND.labels(changelog).set(records)
        except Exception:
            log.exception("standby lag not measured (epoch %d)", state.epoch)

    @app.on_partitions_revoked.connect
    async def _on_revoked(app: Any, revoked: set[Any], **kwargs: Any) -> None:
        health.recovered = False  # until the tables of the next assignment are restored
        gone = {tp.partition for tp in revoked if tp.topic == OWNED.name}
        applier.revoke(gone)
        for part in gone:
            state.drop(part)

    @app.agent(commands_topic, name=f"{__name__}.apply_job_commands")
    async def apply_job_commands(stream: Any) -> Any:
        """trigger / backfill: the job's owner emits the slots, with its epoch (once its
        region's lease holds: a region without it decides nothing, docs/regions.md)."""
        async for event in stream.events():
            state.under_region(await region.held())
            state.command(event.message.partition, codec().decode(event.value))

    @app.timer(interval=FIRE_TICK_S, name=f"{__name__}.fire_due")
    async def fire_due() -> None:
        """Punctuator: decide due slots, then (about once a second) persist progress marks. In
        a spike it keeps deciding round after round, yielding to the event loop in between, so
        the slots due now come before running the ones already fired; a backlog of late slots
        (after an outage) goes at the tick's pace instead. A slot due before the next tick is
        waited for and decided at its moment: the tick alone would have added up to 50 ms (25
        on average) to every fire. Not while the region's lease does not hold: the slots of
        the gap are decided by their misfire policies when it does, here or in the region
        promoted instead (docs/regions.md)."""
        health.tick()
        if (held := region.holds()) is None:
            return
        state.under_region(held)
        await decide_due(state, deciding, health.tick)
        await state.maybe_mark()
        wait_ms = -1 if state.next_due_ms is None else state.next_due_ms - state.clock()
        if 0 <= wait_ms < FIRE_TICK_S * 1000:
            await asyncio.sleep((wait_ms + 1) / 1000)  # +1: woken a hair early, nothing is due yet
            await decide_due(state, deciding, health.tick)

    @app.timer(interval=5.0, name=f"{__name__}.reconcile")
    async def reconcile() -> None:
        """Punctuator: the cleanup crew, trailing the scheduler by the reconciler's lag (while
        the region's lease holds, as the scheduler)."""
        if region.holds() is not None:
            await sweep(state, runs)

    return state


async def decide_due(state: ScheduleState, deciding: Gate, tick: Callable[[], None]) -> None:
    """Decide what is due; a burst is decided round after round while the executor waits
    (``streams.handoff.Gate``), the loop yielded and the worker's health ticked between."""
    burst = Burst(state.decided, state.reached_at_due)
    if burst.round(state.fire_due):
        with deciding.held(), collections_deferred():
            while burst.round(state.fire_due):
                tick()
                await asyncio.sleep(0)
        log.info("burst: %s", burst.report(state.decided, state.reached_at_due))


async def sweep(state: ScheduleState, runs: Runs) -> None:
    """One round of the cleanup crew.

    The ends of the fired partitions, which tell a slot still queued for the executor from one
    it went past, are asked of the broker before the executor's position is read. Why not the
    consumer's high watermark: it is only as recent as the partition's last fetch, and while a
    bulk delete of a million jobs filled the consumer's fetches the survivor of a mid-spike
    kill took 52 queued slots for lost (``bench.failover --spike``)."""
    parts = sorted(state.partitions.indexes)
    try:
        ends = await asyncio.get_running_loop().run_in_executor(
            None, admin.end_offsets, state.bootstrap, [(FIRED.name, p) for p in parts])
    except Exception as exc:  # the broker did not answer: the sweep waits for the next tick
        log.warning("reconciler sweep skipped: the ends of %s partitions %s unknown (%s; "
                    "epoch %d)", FIRED.name, parts, exc, state.epoch)
        return
    state.reconcile(runs.in_flight_ids(), runs.queues({p: ends[(FIRED.name, p)] for p in parts}))


@contextmanager
def collections_deferred(freeze: bool = False) -> Iterator[None]:
    """No automatic garbage collection for the body of the ``with`` (a burst, a rebuild), as it
    was after; with ``freeze``, whatever is alive when the body ends is frozen (``gc.freeze``)
    before collections resume.

    Why, for a burst: it allocates a handful of objects per slot, so at the worker's thresholds
    (``streams.worker.GC_THRESHOLDS``) a 50,000-slot burst ran some twenty young collections, about
    10 ms each with a million jobs indexed, inside the very second its slots were due. What they
    would have found is collected at the next threshold after the burst, when the executor's turn
    comes anyway; a burst is short (only slots still on time), so the heap grows little.

    Why, frozen, for a rebuild of the due indexes: collections while an index grows took a fifth
    of a rebuild; and collected after it, what it built was walked for nothing, in the GIL, while
    the consumer thread's heartbeats waited on it: with 1M jobs indexed, a young collection of the
    rebuild's objects took 175 ms and the full one after it 136 ms (``bench.scale --jobs 2000000
    --workers 2``), five times that at 10M, against a 2 s session. Frozen, they are kept out of
    every later collection. What the body leaves as cyclic garbage is frozen with them; the
    caller collects just before it."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()  # before any allocation can run a collection over the body's objects
        if was_enabled:
            gc.enable()
