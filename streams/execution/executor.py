"""The executor: runs fired slots against their targets and records outcomes on the ledger.

    cronstream.fired ──▶ PartitionReader (librdkafka, batches) ──▶ [execute_fired] ──▶ target
                                                                   │      └──▶ cronstream.ledger
                                                                   │           cronstream.dlq
                         table fires-done ◀── DoneMarks (batched) ─┘

A fired record's commit protocol, in order (``run`` and ``record``):

1. read: the reader hands a batch over; each record is taken once (``offsets.Taken``), its
   epoch checked (a zombie scheduler's record is dropped), its fire id looked up in the done
   marks (a slot done, running or begun before a crash is not run again: ``replays``);
2. queued: new slots wait in the run queue (``dispatch``: tenants take turns, a per-host limit,
   each tenant's fires per second (``fire_quota``), a turn that comes past ``max_lateness_s`` is
   ``expired_stale``), read ahead up to
   ``MAX_WAITING`` so a small tenant's slot need not wait behind a spike's hundred thousand;
3. run: the target is attempted with its retries (``targets.Targets``), after a durable intent
   for the kinds a person could receive twice (``targets.AT_MOST_ONCE``), which says
   ``REFUSED`` while a refused attempt (nothing left) waits to be tried again;
4. ledger: the outcome is produced and acknowledged (with a dead letter if it failed), a turn's
   records in one batch (``Outbox``); the scheduler's pending slot is resolved in-process
   (``Decisions.slot_decided``, ``streams.handoff``: jobs, fired and ledger are co-partitioned,
   nothing needs reading back);
5. done: the fire id is marked done (``DoneMarks``: visible at once, durable in batches);
6. commit: once the mark is acknowledged the record is resolved, and the partition's commit may
   pass it (only the contiguous resolved prefix is committed, every ``COMMIT_EVERY_S``).

A crash anywhere before 6 reads the record again from the commit, and the marks make that
harmless: a slot whose outcome was lost is run again (at-least-once; webhooks carry the fire
id), a done one is not, an email or a text whose intent was marked is recorded ``unknown``
and not sent again, one whose attempt was refused is run again. The worker's partitions of
the jobs topic are the executor's (``assign``/``revoke``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from confluent_kafka import Message

from streams.adapters import dns, ses, sms, tenants
from streams.execution import overlap, reminders, targets
from streams.execution.arrivals import Arrival, Position, classify
from streams.execution.dispatch import RunQueue, Waiting, expiry_reason
from streams.execution.done_marks import DoneMarks
from streams.execution.fire_quota import FireQuota
from streams.execution.offsets import Taken
from streams.execution.retries import retryable, throttle_wait_s
from streams.handoff import Decisions, ExecutorQueue, Gate
from streams.ledger import job_entry
from streams.records import DeadLetter, Fired
from streams.runtime import admin, metrics, region
from streams.runtime.app import Runtime
from streams.runtime.authority import Lease, NoRegion
from streams.runtime.backoff import backoff_s
from streams.runtime.clock import now_ms
from streams.runtime.codec import codec
from streams.runtime.emit import Emitter, Outbox
from streams.runtime.fencing import EpochFence
from streams.runtime.partition_reader import Assigned, Notice, PartitionReader
from streams.runtime.topic_view import TopicView
from streams.scheduling import quiet_hours
from streams.topology import (
    APP_ID,
    BEGUN,
    DLQ,
    DONE_TABLE,
    FIRED,
    INTENT,
    JOBS,
    LEDGER,
    OWNED,
    REFUSED,
    TENANTS,
)

log = logging.getLogger(__name__)

# slots being run (or resolved without a run) at once: most of a run's time is spent waiting
# (the target's answer, then the broker's acknowledgement of its ledger record), not computing
# measured on the 20k webhook spike: 256 ran 2,196-2,296 runs/s, 1,024 2,004 (more runs at
# once only make more to switch between on the one event loop)
MAX_IN_FLIGHT = 256
# read ahead of the runs: a spike's slots wait here, so that what runs next is chosen fairly
# (streams.execution.dispatch) rather than in the fired topic's order
MAX_WAITING = 100_000
BACKLOG_EVERY_S = 1.0  # the backlog gauges' refresh while nothing else wakes the dispatcher
COMMIT_EVERY_S = 1.0
# the fields a fired record is sorted into its tenant's turn by (``Executor.sort``)
HEAD = ("fire_id", "job_id", "tenant", "fired_ms", "epoch")
TURN = 64  # records of one tenant taken up in a turn of the intake
RECORD_RETRY_S = (0.2, 5.0)  # backoff of a ledger write the broker refused: first, cap


@dataclass(frozen=True, slots=True)
class Slot:
    """A fired record taken up: where it was read, and the record."""

    partition: int
    offset: int
    fired: Fired


class Reader(Protocol):
    """The fired topic's reader as the executor drives it (``PartitionReader``)."""

    room: Any  # threading.Event: set while the executor has room for more

    def start(self, loop: asyncio.AbstractEventLoop, deliver: Callable[[Notice], None]) -> None: ...
    def assign(self, partitions: set[int]) -> None: ...
    def revoke(self, partitions: set[int]) -> None: ...
    def commit(self, offsets: dict[int, int], on_failed: Callable[[int, int], None]) -> None: ...


class Sender(Protocol):
    def send(self, topic: Any, key: str, value: bytes | None,
             partition: int | None = None) -> asyncio.Future[None]: ...


class Attempts(Protocol):
    async def attempt(self, fired: Fired) -> targets.CallResult: ...


class Executor:
    """Runs the fired records of this worker's partitions; also the scheduler's ``Runs``: what
    is done (the done marks), what runs now, and how far it has taken each partition up."""

    def __init__(self, marks: DoneMarks, targets_: Attempts, reader: Reader, outbox: Sender,
                 deciding: Gate, *, per_host: int = 256,
                 clock: Callable[[], int] = now_ms,
                 fires_per_s: Callable[[str], int] = lambda tenant: tenants.DEFAULT_FIRES_PER_S,
                 region: Lease | None = None, partitions: int) -> None:
        """``fires_per_s``: a tenant's ``max_fires_per_s`` now, read without waiting
        (``targets.TenantRecords.fires_per_s``); this executor starts its share of it
        (``fire_quota``) of the jobs topic's ``partitions`` (``Settings.partitions``)."""
        self.marks, self.targets, self.reader, self.outbox = marks, targets_, reader, outbox
        self.deciding, self.clock = deciding, clock
        # a run starts only under the region's lease; its horizon says which reminders a
        # region deposed without a hand-over may have sent (docs/regions.md)
        self.region = region or NoRegion()
        # the scheduler's side: told a slot's decision is on the ledger (streams.worker wires it)
        self.decisions: Decisions | None = None
        self.partitions: set[int] = set()  # the partitions the worker gave the executor
        self.taken = Taken()
        self.running: dict[str, int] = {}  # job id -> runs in flight
        self.quota = FireQuota(fires_per_s, JOBS.count(partitions))
        self.waiting: RunQueue[Slot] = RunQueue(per_host, self.quota)  # read, not yet started
        self.active = 0  # slots being run or resolved now (at most MAX_IN_FLIGHT)
        self.buffered: dict[str, Waiting[Slot]] = {}  # job -> its slot held by buffer_one
        self.in_flight: dict[str, Position] = {}  # fire id -> where its running record was read
        self.taken_up: dict[int, tuple[int, int]] = {}  # partition -> (fired_ms, next offset)
        self.fence = EpochFence()
        self.replays = 0
        self._inbox: deque[list[Message]] = deque()  # batches read, not yet sorted
        self._inbox_size = 0
        # tenant -> its records sorted (taken, fenced), not yet taken up, in read order
        self._turns: dict[str, deque[Message]] = {}
        self._sorted = 0
        self._inbox_ready = asyncio.Event()
        self._woken = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # -- partitions ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the reader and the executor's tasks on the running loop (once)."""
        if self._tasks:
            return
        loop = asyncio.get_running_loop()
        self.reader.start(loop, self.deliver)
        self._tasks = [loop.create_task(self._supervised(step), name=f"executor-{step.__name__}")
                       for step in (self.intake, self.dispatching, self.committing)]

    async def _supervised(self, step: Callable[[], Any]) -> None:
        """Run one of the executor's tasks for the life of the worker, again if it ever fails
        (it logs why): a stopped intake or dispatcher would stop every run of the worker."""
        while True:
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("executor task %s failed; started again", step.__name__)
                await asyncio.sleep(1.0)

    def assign(self, partitions: set[int]) -> None:
        """After a recovery: the worker's partitions now. The done table's are recovered, so
        the reader may start on the new ones, from their commits."""
        gone = self.partitions - partitions
        if gone:
            self.revoke(gone)
        new = partitions - self.partitions
        self.partitions |= new
        self.quota.held(len(self.partitions))
        self.marks.assign(new)
        if new:
            self.reader.assign(new)

    def revoke(self, partitions: set[int]) -> None:
        """The partitions go (a rebalance): what is resolved is committed, the slots still
        waiting are dropped (the next owner reads them from the commit), runs already started
        finish, and nothing of these partitions is committed again from here."""
        mine = partitions & self.partitions
        if not mine:
            return
        self.reader.commit({p: o for p, o in self.taken.committable().items() if p in mine},
                           self.taken.uncommitted)
        self.reader.revoke(mine)
        self.partitions -= mine
        self.quota.held(len(self.partitions))
        for part in mine:
            self.fence.forget(part)
            self.taken.forget(part)
            self.marks.forget(part)
            self.taken_up.pop(part, None)
        for tenant, line in list(self._turns.items()):
            kept = deque(msg for msg in line if msg.partition() not in mine)
            self._sorted -= len(line) - len(kept)
            if kept:
                self._turns[tenant] = kept
            else:
                del self._turns[tenant]
        gone = self.waiting.remove_if(lambda slot: slot.partition in mine)
        for job_id, held in list(self.buffered.items()):
            if held.item.partition in mine:
                gone.append(self.buffered.pop(job_id))
        for waiting in gone:
            self.in_flight.pop(waiting.item.fired["fire_id"], None)
        log.info("partitions %s revoked: %d waiting slots left to their next owner",
                 sorted(mine), len(gone))
        self.wake()

    # -- reading -----------------------------------------------------------------------------------
    def deliver(self, notice: Notice) -> None:
        """On the loop, from the reader's thread, in the order it read and was told."""
        if isinstance(notice, Assigned):
            for part, start in notice.starts.items():
                if part in self.partitions:
                    self.taken.assign(part, start)
            return
        self._inbox.append(notice)
        self._inbox_size += len(notice)
        if self.read_ahead() >= MAX_WAITING:
            self.reader.room.clear()  # read ahead no further until the dispatcher takes some
        self._inbox_ready.set()

    def read_ahead(self) -> int:
        """Records read and not started: in the inbox, sorted into turns, or waiting to run."""
        return self._inbox_size + self._sorted + len(self.waiting)

    async def intake(self) -> None:
        """Take up the records read into the run queue, in the tenants' turns (``sort``, then
        ``take_turn``). Not held while the scheduler decides a burst (the runs are,
        ``dispatching``): when the runs may start, the queue holds the burst's slots."""
        while True:
            await self._inbox_ready.wait()
            self._inbox_ready.clear()
            while self._inbox or self._turns:
                while self._inbox:
                    batch = self._inbox.popleft()
                    self._inbox_size -= len(batch)
                    self.sort(batch)
                self.take_turn()
                self.wake()
                await asyncio.sleep(0)  # the runs' callbacks between two turns

    def sort(self, batch: list[Message]) -> None:
        """Step 1 for a batch, in the order it was read: each record taken once, fenced by its
        epoch (an older one after a newer one on its partition is a zombie scheduler's, and the
        check needs the partition's order), and put in its tenant's turn by its first fields
        alone (``Codec.decode_leading``, a fifth of a whole decode). Why turns: a spike of 100k
        records is read in a second and taken up in about as long, and a small tenant's slot
        decided in the same burst (last in its partition: a job that fires every second has the
        newest index entry) waited for all of it; in turns it is taken up in the first."""
        for msg in batch:
            part, offset = msg.partition(), msg.offset()
            if not self.taken.take(part, offset):
                continue  # its partition was revoked, or it was read before
            try:
                head = codec().decode_leading(msg.value(), "Fired", HEAD)
            except Exception:
                log.exception("fired record at partition %d offset %d cannot be decoded; "
                              "skipped", part, offset)
                self.taken.resolve(part, offset)
                continue
            self.taken_up[part] = (head["fired_ms"], offset + 1)  # the reconciler's
            if not self.fence.admit(part, head["epoch"]):
                log.warning("fenced %s of job %s tenant %s: epoch %d < %d on partition %d "
                            "offset %d", head["fire_id"], head["job_id"], head["tenant"],
                            head["epoch"], self.fence.highest[part], part, offset)
                self.taken.resolve(part, offset)
                continue
            self._turns.setdefault(head["tenant"], deque()).append(msg)
            self._sorted += 1

    def take_turn(self) -> None:
        """Step 1's second half: up to ``TURN`` records of each tenant in turn, decoded whole
        and taken up (``take``)."""
        for tenant in list(self._turns):
            line = self._turns[tenant]
            for _ in range(min(TURN, len(line))):
                msg = line.popleft()
                self._sorted -= 1
                part, offset = msg.partition(), msg.offset()
                try:
                    fired = codec().decode(msg.value())
                except Exception:
                    log.exception("fired record at partition %d offset %d cannot be decoded; "
                                  "skipped", part, offset)
                    self.taken.resolve(part, offset)
                    continue
                self.take(Slot(part, offset, fired))
            if not line:
                del self._turns[tenant]

    def take(self, slot: Slot) -> None:
        fired, part, offset = slot.fired, slot.partition, slot.offset
        fid, job_id = fired["fire_id"], fired["job_id"]
        arrival = classify(self.marks.get(part, fid), self.in_flight.get(fid), (part, offset))
        if arrival is Arrival.UNKNOWN_SEND:
            # a send begun before a crash may have left: never again (Borgcron: prefer a skip to
            # a double); it is resolved as unknown, and said so
            self.resolve(Waiting(slot, fired["tenant"], "", fired["nominal_ms"], None),
                         fired["decision"], UNKNOWN_REASON, outcome="unknown")
            return
        if arrival is Arrival.REDELIVERED:
            log.info("fire %s of job %s: its running record (partition %d offset %d) read "
                     "again; left to the running slot", fid, job_id, part, offset)
            return
        if arrival is not Arrival.NEW:
            self.replays += 1
            log.info("fire %s already done or running; not run again (partition %d offset %d)",
                     fid, part, offset)
            self.taken.resolve(part, offset)
            return
        # from here the slot is the executor's until resolved: waiting counts as in flight
        self.waiting.push(Waiting(slot, fired["tenant"], targets.host_of(fired["target"]),
                                  fired["nominal_ms"], fired["run_by_ms"]))
        self.in_flight[fid] = (part, offset)

    # -- dispatching ---------------------------------------------------------------------------
    def wake(self) -> None:
        self._woken.set()

    async def dispatching(self) -> None:
        """Whenever a slot arrives or a run ends, start what has room (``dispatch`` picks
        which), a burst's decisions first."""
        while True:
            # the backlog's figures are kept fresh while nothing happens too. Why not
            # ``wait_for``: on 3.11 it swallows a cancellation that meets the event being set
            # (python/cpython#86296), and the worker's shutdown then never ends
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.idle_s()):
                    await self._woken.wait()
            self._woken.clear()
            await self.deciding.passed()
            # a region without its lease starts nothing and expires nothing: the slots are
            # decided when it holds again, or by the region promoted instead (docs/regions.md)
            await self.region.held()
            self.dispatch()

    def idle_s(self) -> float:
        """How long the dispatcher may wait for a wake-up: until the next token of a tenant held
        by its quota (nothing else wakes it then: no slot arrives, no run ends), at most
        ``BACKLOG_EVERY_S``."""
        due = self.waiting.next_token_ms
        if due is None:
            return BACKLOG_EVERY_S
        return min(BACKLOG_EVERY_S, max(0.0, (due - self.clock()) / 1000))

    def dispatch(self) -> None:
        """Start waiting slots while fewer than ``MAX_IN_FLIGHT`` are being resolved: run them,
        or resolve them without a run (expired, or skipped/held by the job's overlap policy)."""
        while self.active < MAX_IN_FLIGHT:
            now = self.clock()
            chosen, expired = self.waiting.take(now, MAX_IN_FLIGHT - self.active)
            for waiting in expired:
                metrics.RUNS_EXPIRED.inc()
                self.resolve(waiting, "expired_stale",
                             expiry_reason(waiting, now, self.waiting.held_by_quota(waiting)))
            if chosen is None:
                break
            quiet = quiet_hours.refused_at_run(chosen.item.fired["target"], now)
            if quiet is not None:  # a text's run inside its quiet hours: never sent there
                self.waiting.not_run(chosen)
                self.resolve(chosen, "expired_stale", quiet)
                continue
            job_id = chosen.item.fired["job_id"]
            action = overlap.decide(chosen.item.fired["overlap"], self.running.get(job_id, 0) > 0)
            if action is overlap.Action.RUN:
                self.start_run(chosen)
                continue
            self.waiting.not_run(chosen)  # its host's room and its tenant's token given back
            if action is overlap.Action.SKIP:
                self.resolve(chosen, "skipped_overlap", "previous run still in flight")
            else:  # BUFFER: held until the run in flight ends (``run``'s tail queues it again)
                held = self.buffered.pop(job_id, None)
                self.buffered[job_id] = chosen
                if held is not None:
                    self.resolve(held, "skipped_overlap", "buffer_one: replaced by a newer slot")
        if self.read_ahead() < MAX_WAITING:
            self.reader.room.set()
        oldest = self.waiting.oldest_nominal_ms()
        metrics.RUN_BACKLOG.set(len(self.waiting) + self.active + len(self.buffered))
        metrics.RUN_BACKLOG_AGE.set(0 if oldest is None else max(0, self.clock() - oldest) / 1000)

    def start_run(self, chosen: Waiting[Slot]) -> None:
        self.active += 1
        job_id = chosen.item.fired["job_id"]
        self.running[job_id] = self.running.get(job_id, 0) + 1
        asyncio.get_running_loop().create_task(self.run(chosen))

    def resolve(self, waiting: Waiting[Slot], decision: str, reason: str,
                outcome: str = "not_run") -> None:
        """Resolve a slot without running it: its decision recorded like a run's outcome."""
        self.active += 1
        asyncio.get_running_loop().create_task(self.resolved(waiting.item, decision, reason,
                                                             outcome))

    async def resolved(self, slot: Slot, decision: str, reason: str, outcome: str) -> None:
        try:
            if slot.fired["target"]["type"] == reminders.REMINDER and self.channels_begun(slot):
                outcome = await self.settle_reminder(slot, decision, reason, outcome)
            else:
                await self.record(slot, decision, reason, outcome)
            self.done(slot, outcome)
        except Exception:
            self._not_recorded(slot, decision)
        finally:
            self.in_flight.pop(slot.fired["fire_id"], None)
            self.active -= 1
            self.wake()

    async def run(self, chosen: Waiting[Slot]) -> None:
        """One slot's run: steps 3 to 5 of the module's protocol, in order."""
        slot = chosen.item
        fired = slot.fired
        fid, job_id = fired["fire_id"], fired["job_id"]
        host_held = True  # the host's room is held while its target is called, no longer
        try:
            metrics.FIRE_LATENESS.observe(max(0, self.clock() - fired["nominal_ms"]) / 1000)
            if fired["target"]["type"] == reminders.REMINDER:
                outcome = await self.run_reminder(slot)
                self.waiting.ended(chosen.host)
                host_held = False
                self.wake()
                self.done(slot, outcome)
                return
            if fired["target"]["type"] in targets.AT_MOST_ONCE:
                result, attempts = await self.send_once(slot, fired, fid)
            else:
                result, attempts = await self.attempts(fired, slot.partition)
            self.waiting.ended(chosen.host)
            host_held = False
            self.wake()  # the host has room for its next call now, not after the ledger
            reason = run_reason(fired, result.note)
            if fired["decision"] == quiet_hours.HELD:
                reason = quiet_hours.held_run_reason(fired["target"], fired["fired_ms"], reason)
            outcome = outcome_of(result)
            metrics.EXECUTIONS.labels(outcome).inc()
            await self.record(slot, fired["decision"], reason, outcome, attempts, result)
            self.done(slot, outcome)
        except Exception:
            self._not_recorded(slot, fired["decision"])
        finally:
            self.in_flight.pop(fid, None)
            self.running[job_id] -= 1
            if not self.running[job_id]:
                del self.running[job_id]
            self.active -= 1
            if host_held:
                self.waiting.ended(chosen.host)
            held = self.buffered.pop(job_id, None)
            if held is not None:
                self.waiting.push(held)  # its turn again, now that the run it waited for ended
            self.wake()

    async def send_once(self, slot: Slot, sent: Fired, key: str
                        ) -> tuple[targets.CallResult, int]:
        """An email's or a text's attempts, at most once: ``sent`` is the slot's record, or a
        reminder channel's (``reminders.channel_fired``), ``key`` its mark. Under the region's
        lease; ``unknown`` without a request when a deposed region may have sent it
        (``inherited_send``); else after the durable intent, acknowledged before the first
        attempt, so a worker that takes over after a crash knows the send may have happened
        and does not repeat it."""
        await self.region.held()  # the horizon is the lease's: known once it holds
        inherited = inherited_send(sent, self.region.horizon_ms())
        if inherited is not None:
            return inherited, 0
        await self.intend(slot.partition, key, sent["fire_id"])
        return await self.attempts(sent, slot.partition, mark_id=key)

    async def intend(self, partition: int, key: str, fid: str) -> None:
        """The durable intent before a send (``key``: the fire id, or a reminder's channel),
        only while ``partition`` is this worker's. A run started before a revocation finishes,
        but must begin no send after it: the new owner recovered the done table before this
        intent, would never see it, and would send too. Raises ``PartitionGone`` then: the
        record stays uncommitted, and the new owner runs what is left."""
        if partition not in self.partitions:
            raise PartitionGone(f"fire {fid}: partition {partition} was revoked before {key} "
                                "was sent; left to its next owner")
        await self.marks.put_acked(partition, key, INTENT)

    def _not_recorded(self, slot: Slot, decision: str) -> None:
        fired = slot.fired
        log.exception("fire %s of job %s tenant %s partition %d offset %d: %s not recorded; "
                      "its record stays uncommitted and is read again at the next assignment",
                      fired["fire_id"], fired["job_id"], fired["tenant"], slot.partition,
                      slot.offset, decision)

    async def attempts(self, fired: Fired, partition: int | None = None,
                       mark_id: str | None = None) -> tuple[targets.CallResult, int]:
        """The target's attempts with their retries, each started under the region's lease: an
        attempt that found it gone sent nothing and does not count.

        At most once (``targets.AT_MOST_ONCE``, with its ``partition``): the caller wrote the
        intent before the first attempt. An attempt answered "not sent" (throttled, not reached,
        the lease gone before the request) left nothing, so while the run waits to try again its
        mark says ``REFUSED``, and ``INTENT`` again before the next attempt: a crash during the
        wait leaves a run to make again, not an ``unknown`` send. What is ``unknown`` after a
        crash is then only what had a request out (issue 45's target: a burst of texts under
        throttling spends most of its time waiting, not sending). ``mark_id``: the mark's key
        when it is not the fire id (a reminder's channel, ``reminders.channel_id``)."""
        max_attempts = max(1, fired["retry_max_attempts"])
        once = partition is not None and fired["target"]["type"] in targets.AT_MOST_ONCE
        result = targets.CallResult(False, None, "not attempted")
        attempt = 1
        refused = False  # the mark says REFUSED: INTENT again before the next request
        throttled = 0  # attempts the service throttled: made (and counted on the ledger), not
        # counted against max_attempts while the slot's deadline allows another

        async def mark(value: bytes) -> bool:
            """Mark the run (at most once only), acknowledged; whether it now says REFUSED."""
            if once and partition is not None:
                key = mark_id or fired["fire_id"]
                if value == INTENT:
                    await self.intend(partition, key, fired["fire_id"])
                else:
                    await self.marks.put_acked(partition, key, value)
            return once and value == REFUSED

        while attempt <= max_attempts:
            await self.region.held()
            if refused:
                refused = await mark(INTENT)
            result = await self.targets.attempt(fired)
            if result.lease_lost:
                log.warning("fire %s of job %s tenant %s: %s; waiting for the lease",
                            fired["fire_id"], fired["job_id"], fired["tenant"], result.error)
                refused = await mark(REFUSED)
                continue
            if result.ok or result.final or not retryable(result.status_code):
                return result, attempt + throttled
            if result.throttled and fired["run_by_ms"] is not None:
                wait = throttle_wait_s(throttled + 1, fired["retry_initial_backoff_s"],
                                       fired["retry_max_backoff_s"], fired["fire_id"],
                                       self.clock(), fired["run_by_ms"])
                if wait is None:
                    log.warning("fire %s of job %s tenant %s: throttled until its deadline; "
                                "not sent: %s", fired["fire_id"], fired["job_id"],
                                fired["tenant"], result.error)
                    return replace(result, error=f"{result.error}; throttled until the slot's "
                                   "deadline (misfire.max_lateness_s)"), attempt + throttled
                throttled += 1
                refused = await mark(REFUSED)
                await asyncio.sleep(wait)
                continue
            if attempt < max_attempts:
                if not result.unknown:
                    refused = await mark(REFUSED)
                await asyncio.sleep(backoff_s(attempt, fired["retry_initial_backoff_s"],
                                                    fired["retry_max_backoff_s"], fired["fire_id"]))
            attempt += 1
        return result, max_attempts + throttled

    async def record(self, slot: Slot, decision: str, reason: str | None, outcome: str,
                     attempts: int = 0, result: targets.CallResult | None = None,
                     channel: str | None = None, letter: bool = True) -> None:
        """Step 4: the outcome on the ledger (and a dead letter if the run failed, unless not
        ``letter``), acknowledged. ``channel``: one channel of a reminder's run, its own entry
        and dead letter (``reminders.channel_id``)."""
        fired = slot.fired
        fid = fired["fire_id"]
        key = fid if channel is None else reminders.channel_id(fid, channel)
        entry = job_entry(
            fire_id=fid, job=fired, nominal_ms=fired["nominal_ms"], decision=decision,
            reason=reason, lateness_ms=max(0, fired["fired_ms"] - fired["nominal_ms"]),
            epoch=fired["epoch"], outcome=outcome, attempts=attempts,
            status_code=result.status_code if result else None,
            error=result.error if result else None,
            message_id=result.message_id if result else None,
            fired_ms=fired["fired_ms"] if attempts else None, completed_ms=self.clock(),
            record_id=key, channel=channel,
        )
        records: list[tuple[Any, str, bytes, int | None]] = [
            (LEDGER, key, codec().encode("LedgerEntry", entry), slot.partition)]
        if outcome == "failed" and result is not None and letter:
            log.warning("fire %s of job %s tenant %s%s failed after %d attempts: %s", fid,
                        fired["job_id"], fired["tenant"], f" channel {channel}" if channel
                        else "", attempts, result.error)
            sent = fired if channel is None else reminders.channel_fired(fired, channel)
            records.append((DLQ, fid, codec().encode("DeadLetter", self.dead_letter(
                sent, attempts, result)), None))
        await self._acknowledged(slot, records)

    def done(self, slot: Slot, outcome: str) -> None:
        """Step 5, once the slot's ledger is acknowledged: the scheduler told, then the done
        mark, whose acknowledgement resolves the record for the commit. The mark never runs
        ahead of the ledger, so a slot whose outcome was lost in a crash is run (or resolved)
        again rather than taken for done."""
        fid = slot.fired["fire_id"]
        if self.decisions is not None:
            self.decisions.slot_decided(fid)
        self.marks.mark(slot.partition, fid, outcome.encode(),
                        lambda: self.taken.resolve(slot.partition, slot.offset))

    async def run_reminder(self, slot: Slot) -> str:
        """A reminder's run (``reminders``): its channels in the order of preference, each as
        ``run`` runs a lone email or text (under the lease, its own durable intent, attempts,
        ledger entry and done mark, keyed ``<fire id>#<channel>``), a fallback's next channel
        only when the one before was not sent for its recipient's sake. A channel found begun
        before a crash is ``unknown`` and not sent again; one found done is not run again, and
        its verdict decides the fallback as it did. Returns the slot's outcome."""
        fired = slot.fired
        target = fired["target"]
        channels = reminders.channels_of(target)
        if not channels:  # the API refuses it; a record written another way is said to fail
            await self.record(slot, fired["decision"], "a reminder without channels", "failed")
            return "failed"
        verdicts: list[str] = []
        for channel in channels:
            if reminders.goes_on(target["reminder_deliver"], verdicts):
                verdicts.append(await self.run_channel(slot, channel))
                continue
            reason = reminders.not_needed_reason(channels, verdicts)
            await self.record(slot, fired["decision"], reason, "not_run", channel=channel)
            verdicts.append(reminders.NOT_NEEDED)
        return reminders.slot_outcome(verdicts)

    def channels_begun(self, slot: Slot) -> bool:
        """Whether a channel of a reminder slot has a mark: it ran in part before a crash."""
        fid = slot.fired["fire_id"]
        return any(self.marks.get(slot.partition, reminders.channel_id(fid, c)) is not None
                   for c in reminders.channels_of(slot.fired["target"]))

    async def settle_reminder(self, slot: Slot, decision: str, reason: str, outcome: str
                              ) -> str:
        """A reminder resolved without a run (expired, skipped) after a crash cut its run short:
        a channel recorded stays as it is, one begun is ``unknown`` (never sent again), and the
        rest get the slot's decision, each its own entry as a run writes them. The slot's
        outcome, as ``run_reminder``'s."""
        fired, part = slot.fired, slot.partition
        verdicts = []
        for channel in reminders.channels_of(fired["target"]):
            key = reminders.channel_id(fired["fire_id"], channel)
            held = self.marks.get(part, key)
            if held is not None and held not in BEGUN:
                recorded = reminders.Recorded.decode(held)
                await self.record_channel(slot, channel, recorded, letter=False)
            else:
                recorded = reminders.Recorded(outcome, decision, reason)
                if held == INTENT:
                    recorded = reminders.Recorded("unknown", decision, UNKNOWN_REASON)
                await self.marks.put_acked(part, key, recorded.encode())
                await self.record_channel(slot, channel, recorded)
            verdicts.append(recorded.verdict)
        return reminders.slot_outcome(verdicts)

    async def run_channel(self, slot: Slot, channel: str) -> str:
        """One channel of a reminder: its verdict (``reminders``), in its done mark (acknowledged
        first) and on the ledger. A channel found recorded by a run a crash cut short has its
        entry written again from the mark (``reminders.Recorded``), and is not run again."""
        fired, part = slot.fired, slot.partition
        key = reminders.channel_id(fired["fire_id"], channel)
        held = self.marks.get(part, key)
        if held is not None and held not in BEGUN:
            recorded = reminders.Recorded.decode(held)
            await self.record_channel(slot, channel, recorded, letter=False)
            return recorded.verdict
        sent = reminders.channel_fired(fired, channel)
        attempts, result = 0, None
        if held == INTENT:
            log.warning("fire %s of job %s tenant %s channel %s: its send began before a crash; "
                        "recorded unknown, not sent again", fired["fire_id"], fired["job_id"],
                        fired["tenant"], channel)
            verdict, reason = "unknown", UNKNOWN_REASON
        elif (quiet := quiet_hours.refused_at_run(sent["target"], self.clock())) is not None:
            verdict, reason = reminders.QUIET, quiet
        else:
            result, attempts = await self.send_once(slot, sent, key)
            verdict, reason = outcome_of(result), run_reason(fired, result.note)
        recorded = reminders.Recorded(
            verdict, fired["decision"], reason, attempts,
            result.status_code if result else None, result.error if result else None,
            result.message_id if result else None)
        metrics.EXECUTIONS.labels(reminders.ledger_outcome(verdict)).inc()
        await self.marks.put_acked(part, key, recorded.encode())
        await self.record_channel(slot, channel, recorded)
        return verdict

    async def record_channel(self, slot: Slot, channel: str, recorded: reminders.Recorded,
                             letter: bool = True) -> None:
        """A channel's entry on the ledger as its mark has it (``letter``: with its dead letter
        if it failed; not when written again after a crash: the first run wrote it)."""
        result = targets.CallResult(False, recorded.status_code, recorded.error,
                                    message_id=recorded.message_id)
        await self.record(slot, recorded.decision, recorded.reason,
                          reminders.ledger_outcome(recorded.verdict), recorded.attempts,
                          result, channel=channel, letter=letter)

    async def _acknowledged(self, slot: Slot,
                            records: list[tuple[Any, str, bytes, int | None]]) -> None:
        """Produce ``records`` (topic, key, value, partition: the ledger's keyed by its record
        id, the dead letter's by the fire id) and wait for the broker, again after a refusal
        (backoff) while the partition is this worker's: the run has happened, only its record
        is missing."""
        fid = slot.fired["fire_id"]
        attempt = 0
        while True:
            try:
                await asyncio.gather(*(self.outbox.send(topic, key, value, partition)
                                       for topic, key, value, partition in records))
                return
            except Exception as exc:
                attempt += 1
                if slot.partition not in self.partitions:
                    raise
                log.warning("fire %s of job %s partition %d offset %d: ledger write refused "
                            "(%s); attempt %d, retrying", fid, slot.fired["job_id"],
                            slot.partition, slot.offset, exc, attempt)
                await asyncio.sleep(backoff_s(attempt, *RECORD_RETRY_S, fid))

    def dead_letter(self, fired: Fired, attempts: int,
                    result: targets.CallResult) -> DeadLetter:
        return {
            "fire_id": fired["fire_id"], "job_id": fired["job_id"], "tenant": fired["tenant"],
            "nominal_ms": fired["nominal_ms"], "attempts": attempts,
            "last_error": result.error or "", "last_status_code": result.status_code,
            "failed_ms": self.clock(), "target": fired["target"],
        }

    # -- committing ----------------------------------------------------------------------------
    async def committing(self) -> None:
        """Step 6, every ``COMMIT_EVERY_S``: each partition's resolved prefix."""
        while True:
            await asyncio.sleep(COMMIT_EVERY_S)
            self.reader.commit(self.taken.committable(), self.taken.uncommitted)

    # -- the scheduler's view of the runs (streams.handoff.Runs) -------------------
    def done_mark(self, partition: int, fid: str) -> bytes | None:
        return self.marks.get(partition, fid)

    def in_flight_ids(self) -> set[str]:
        return set(self.in_flight)

    def queues(self, ends: dict[int, int]) -> dict[int, ExecutorQueue]:
        """Where the executor stands on each fired partition it has taken records up from,
        against the partition's end (``ends``, read from the broker just before)."""
        return {part: ExecutorQueue(fired_ms, next_offset, ends.get(part))
                for part, (fired_ms, next_offset) in list(self.taken_up.items())}


class PartitionGone(Exception):
    """A send not begun because its partition is no longer this worker's (``intend``)."""


def outcome_of(result: targets.CallResult) -> str:
    """The ledger's outcome of a run: ``suppressed`` is a reminder not sent because its
    recipient opted out, neither a success nor a failure (no dead letter: nothing to fix)."""
    if result.ok:
        return "succeeded"
    if result.suppressed:
        return "suppressed"
    return "unknown" if result.unknown else "failed"


def run_reason(fired: Fired, note: str | None) -> str | None:
    """A run's reason on the ledger: a re-drive says so, else what the target noted."""
    return f"re-driven by the reconciler ({fired['redrives']})" if fired["redrives"] else note


UNKNOWN_REASON = ("at-most-once: the send began before a crash and its outcome is unknown; "
                  "not re-sent")
INHERITED_REASON = ("region failover: asked before the deposed region's lease ended and not "
                    "replicated as done, so it may have been sent there; not sent again "
                    "(at-most-once)")


def inherited_send(fired: Fired, horizon_ms: int) -> targets.CallResult | None:
    """An at-most-once slot a region deposed without a hand-over may have sent (it was asked
    before that region's lease ended: ``region.reminder_inherited``), as its unknown outcome;
    None when this region may send it. Called for a slot the done marks do not have."""
    asked = fired.get("asked_ms") or fired["nominal_ms"]
    if not region.reminder_inherited(asked, horizon_ms):
        return None
    log.warning("fire %s of job %s tenant %s: asked at %d, before the deposed region's lease "
                "ended (%d), and not done here: recorded unknown, not sent", fired["fire_id"],
                fired["job_id"], fired["tenant"], asked, horizon_ms)
    return targets.CallResult(False, None, INHERITED_REASON, final=True, unknown=True,
                              note=INHERITED_REASON)


def register(rt: Runtime, fan_out: targets.FanOut, deciding: Gate,
             suppressions: targets.SuppressionLookup | None = None,
             suppress: targets.Suppress | None = None) -> Executor:
    """The executor's sub-topology on ``rt``'s app: the done table, the fired topic's reader
    (started with the worker, given the worker's partitions after each recovery), ``fan_out``
    runs a campaign's tick (``streams.campaigns.fanout``), ``deciding`` is the scheduler's gate,
    which a burst's runs wait behind (``streams.handoff.Gate``), ``suppressions`` what
    every reminder email's address is checked against first (``streams.execution.reminder_opt_outs``),
    ``suppress`` writes a suppression (a number AWS says opted out: ``Targets.opted_out``)."""
    app, conf = rt.app, rt.settings
    done_table = rt.table(DONE_TABLE)
    emitter = Emitter(conf.bootstrap, f"executor-{rt.worker_id}")
    changelog = next(t for t in admin.changelog_topics() if t.name == DONE_TABLE.changelog(APP_ID))
    records = targets.TenantRecords(lambda: TopicView(conf.bootstrap, TENANTS))
    executor = Executor(
        DoneMarks(done_table, emitter, changelog),
        targets.Targets(fan_out, lambda: emitter, records, MAX_IN_FLIGHT,
                        dns.Resolver(conf.dns_timeout_s), region=rt.region,
                        ses_client=lambda: ses.client(conf.ses_endpoint_url, conf.aws_region),
                        sms_client=lambda: sms.client(conf.sms_endpoint_url, conf.aws_region),
                        suppressions=suppressions, suppress=suppress),
        PartitionReader(conf.bootstrap, f"executor-{rt.worker_id}", FIRED), Outbox(emitter), deciding,
        per_host=conf.runs_per_host, fires_per_s=records.fires_per_s, region=rt.region,
        partitions=conf.partitions)
    metrics.RUNS_PER_HOST.set(conf.runs_per_host)

    @done_table.on_recover
    async def execute_fired() -> None:
        """After each recovery: the reader and the executor's tasks started (the first time),
        and the worker's partitions of the jobs topic handed over, their done marks restored."""
        executor.start()
        records.warm()  # the quotas read the tenants' records from the first slot on
        executor.assign({tp.partition for tp in app.consumer.assignment() if tp.topic == OWNED.name})

    @app.on_partitions_revoked.connect
    async def _on_revoked(app: Any, revoked: set[Any], **kwargs: Any) -> None:
        executor.revoke({tp.partition for tp in revoked if tp.topic == OWNED.name})

    return executor
