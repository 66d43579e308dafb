"""The executor: runs fired slots against their targets and records outcomes on the ledger.

    cronstream.fired ──▶ [execute_fired] ──▶ webhook / Kafka record ──▶ cronstream.ledger
                               │                                   └──▶ cronstream.dlq (retries spent)
                         table fires-done (fire ids already run: replays are not run again)

The agent reads ahead (up to ``MAX_WAITING`` slots) into a run queue, and a dispatcher starts
what runs next (``streams.execution.dispatch``): tenants take turns, a host gets at most
``CRONSTREAM_RUNS_PER_HOST`` calls at once, and a slot whose turn comes after its
``max_lateness_s`` is recorded ``expired_stale`` instead of run. Slots run concurrently (up to
``MAX_IN_FLIGHT``) with manual acks, so an offset is committed only after its slot's outcome is
on the ledger: a crash re-runs at most what was read and not resolved (at-least-once; webhooks
carry the fire id so receivers can dedupe). Before a slot joins the queue:

- fencing: a record whose epoch is older than one already seen on its partition was written by
  a zombie scheduler after a newer owner took over, and is dropped (counted, logged);
- dedupe: a fire id in the done table, or in flight, is not run again; a running slot's own
  record delivered again is left unacknowledged to that slot (``streams.execution.replays``);
- (when its turn comes) overlap: the job's policy decides about a slot whose previous run is
  still in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from streams.adapters import ses
from streams.execution import overlap, targets
from streams.execution.dispatch import RunQueue, Waiting, expiry_reason
from streams.execution.replays import Arrival, Position, classify
from streams.runtime import metrics, retry
from streams.runtime.app import Runtime
from streams.runtime.clock import now_ms
from streams.runtime.codec import codec
from streams.runtime.emit import Emitter
from streams.runtime.event_context import event_task
from streams.runtime.fencing import EpochFence
from streams.runtime.views import StartedOnce, TopicView
from streams.scheduling.ledger import job_entry
from streams.scheduling.priority import Gate
from streams.scheduling.reconciler import ExecutorQueue
from streams.topology import DLQ, DONE_TABLE, FIRED, INTENT, LEDGER, TENANTS

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

FanOut = Callable[[dict[str, Any]], Awaitable[tuple[bool, str]]]
Taken = tuple[Any, Any, dict[str, Any]]  # (stream, event, fired record) of a slot read


class Executor:
    """Runs the fired records of this worker's partitions; also the scheduler's ``Runs``: what
    is done (the done table), what runs now, and how far it has taken each partition up."""

    def __init__(self, done: Any, fan_out: FanOut, *, bootstrap: str = "", worker_id: str = "",
                 tenants: Callable[[], TopicView] | None = None,
                 per_host: int = 256) -> None:
        self.done = done  # the done table (a faust table in a worker), co-partitioned with fired
        self.fan_out = fan_out  # a campaign's tick becomes its fan-out (streams.campaigns)
        self.bootstrap, self.worker_id = bootstrap, worker_id
        self.running: dict[str, int] = {}  # job id -> runs in flight
        self.waiting: RunQueue[Taken] = RunQueue(per_host)  # read, not yet started
        self.active = 0  # slots being run or resolved now (at most MAX_IN_FLIGHT)
        self.buffered: dict[str, Waiting[Taken]] = {}  # job -> its slot held by buffer_one
        self.in_flight: dict[str, Position] = {}  # fire id -> where its running record was read
        self.taken_up: dict[int, tuple[int, int]] = {}  # partition -> (fired_ms, next offset)
        self.fence = EpochFence()
        self.replays = 0
        self._woken: asyncio.Event | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        self._room: asyncio.Event | None = None
        self._emitter: Emitter | None = None
        self._client: aiohttp.ClientSession | None = None
        # the tenants' SSRF allow-lists, read from their compacted topic
        self._tenants = StartedOnce(tenants or (lambda: TopicView(bootstrap, TENANTS)))
        self._ses: Any = None

    # lazily created inside the worker's event loop
    @property
    def woken(self) -> asyncio.Event:
        if self._woken is None:
            self._woken = asyncio.Event()
        return self._woken

    @property
    def emitter(self) -> Emitter:
        if self._emitter is None:
            self._emitter = Emitter(self.bootstrap, f"executor-{self.worker_id}")
        return self._emitter

    @property
    def client(self) -> aiohttp.ClientSession:
        if self._client is None:
            self._client = targets.new_session(MAX_IN_FLIGHT)
        return self._client

    @property
    def ses(self) -> Any:
        if self._ses is None:
            self._ses = ses.client()
        return self._ses

    async def allowed_targets(self, tenant: str) -> list[str]:
        """The tenant's SSRF allow-list (``streams.runtime.views.StartedOnce``)."""
        record = (await self._tenants.get()).get(tenant)
        return list(record["allowed_targets"]) if record else []

    async def accept(self, stream: Any, event: Any) -> None:
        fired = codec().decode(event.value)
        part = event.message.partition
        self.taken_up[part] = (fired["fired_ms"], event.message.offset + 1)  # the reconciler's
        fid, job_id = fired["fire_id"], fired["job_id"]
        if not self.fence.admit(part, fired["epoch"]):
            log.warning("fenced %s of job %s tenant %s: epoch %d < %d on partition %d offset %d",
                        fid, job_id, fired["tenant"], fired["epoch"], self.fence.highest[part],
                        part, event.message.offset)
            await stream.ack(event)
            return
        # get_in: the record's partition is the done table's (co-partitioned), and a RocksDB
        # read without faust's mapping layers was 4 % of a draining executor's GIL time
        arrival = classify(self.done.get_in(part, fid.encode()), self.in_flight.get(fid),
                           (part, event.message.offset))
        if arrival is Arrival.UNKNOWN_SEND:
            # an email whose send began before a crash: it may have left. Never send it twice
            # (Borgcron: prefer a skip to a double); resolve it as unknown and say so.
            await self.record(fired, fired["decision"], "at-most-once: the send began before a "
                              "crash and its outcome is unknown; not re-sent", "unknown", part)
            await stream.ack(event)
            return
        if arrival is Arrival.REDELIVERED:
            log.info("fire %s of job %s: its running record (partition %d offset %d) delivered "
                     "again; left to the running slot to acknowledge", fid, job_id, part,
                     event.message.offset)
            return
        if arrival is not Arrival.NEW:
            self.replays += 1
            log.info("fire %s already done or running; not run again (partition %d offset %d)",
                     fid, part, event.message.offset)
            await stream.ack(event)
            return
        # from here the slot is the executor's until resolved: waiting counts as in flight
        self.waiting.push(Waiting((stream, event, fired), fired["tenant"],
                                  targets.host_of(fired["target"]), fired["nominal_ms"],
                                  fired["run_by_ms"]))
        self.in_flight[fid] = (part, event.message.offset)
        self.wake()
        if len(self.waiting) >= MAX_WAITING:
            # read ahead no further until the dispatcher takes some. This stalls the worker's
            # other agents too (faust hands records to them one at a time); pausing the fired
            # partitions instead would lose records: faust drops what it fetched for a
            # partition paused before delivery, and commits past the gap
            self.room.clear()
            await self.room.wait()

    @property
    def room(self) -> asyncio.Event:
        if self._room is None:
            self._room = asyncio.Event()
            self._room.set()
        return self._room

    def wake(self) -> None:
        self.woken.set()

    def start_dispatcher(self, deciding: Gate) -> None:
        """The dispatcher's task, started by the agent (again if an earlier one ended)."""
        if self._dispatcher is None or self._dispatcher.done():
            if self._dispatcher is not None and not self._dispatcher.cancelled() \
                    and self._dispatcher.exception() is not None:
                log.error("the run dispatcher had stopped; started again",
                          exc_info=self._dispatcher.exception())
            self._dispatcher = asyncio.get_running_loop().create_task(self.dispatching(deciding))

    async def dispatching(self, deciding: Gate) -> None:
        """The dispatcher: whenever a slot arrives or a run ends, start what has room
        (``streams.execution.dispatch`` picks which), a burst's decisions first."""
        while True:
            # the backlog's figures are kept fresh while nothing happens too
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.woken.wait(), BACKLOG_EVERY_S)
            self.woken.clear()
            await deciding.passed()  # a burst is decided first (streams.scheduling.priority)
            self.dispatch()

    def dispatch(self) -> None:
        """Start waiting slots while fewer than ``MAX_IN_FLIGHT`` are being resolved: run them,
        or resolve them without a run (expired, or skipped/held by the job's overlap policy)."""
        while self.active < MAX_IN_FLIGHT:
            chosen, expired = self.waiting.take(now_ms(), MAX_IN_FLIGHT - self.active)
            for waiting in expired:
                metrics.RUNS_EXPIRED.inc()
                self.resolve(waiting, "expired_stale", expiry_reason(waiting, now_ms()))
            if chosen is None:
                break
            stream, event, fired = chosen.item
            job_id = fired["job_id"]
            action = overlap.decide(fired["overlap"], self.running.get(job_id, 0) > 0)
            if action is overlap.Action.RUN:
                self.start(chosen)
                continue
            self.waiting.ended(chosen.host)  # not run now: its host's room is given back
            if action is overlap.Action.SKIP:
                self.resolve(chosen, "skipped_overlap", "previous run still in flight")
            else:  # BUFFER: held until the run in flight ends (``run``'s tail queues it again)
                held = self.buffered.pop(job_id, None)
                self.buffered[job_id] = chosen
                if held is not None:
                    self.resolve(held, "skipped_overlap", "buffer_one: replaced by a newer slot")
        if len(self.waiting) < MAX_WAITING:
            self.room.set()
        oldest = self.waiting.oldest_nominal_ms()
        metrics.RUN_BACKLOG.set(len(self.waiting) + self.active + len(self.buffered))
        metrics.RUN_BACKLOG_AGE.set(0 if oldest is None else max(0, now_ms() - oldest) / 1000)

    def start(self, chosen: Waiting[Taken]) -> None:
        self.active += 1
        stream, event, fired = chosen.item
        self.running[fired["job_id"]] = self.running.get(fired["job_id"], 0) + 1
        event_task(event, self.run(chosen))  # table writes need its partition

    def resolve(self, waiting: Waiting[Taken], decision: str, reason: str) -> None:
        """Resolve a slot without running it: the decision on the ledger, then acknowledged."""
        self.active += 1
        event_task(waiting.item[1], self.resolved(waiting.item, decision, reason))

    async def resolved(self, taken: Taken, decision: str, reason: str) -> None:
        stream, event, fired = taken
        try:
            await self.record(fired, decision, reason, "not_run", event.message.partition)
            await stream.ack(event)
        except Exception:
            log.exception("fire %s of job %s tenant %s partition %d offset %d: %s not recorded; "
                          "left unacked for redelivery", fired["fire_id"], fired["job_id"],
                          fired["tenant"], event.message.partition, event.message.offset,
                          decision)
        finally:
            self.in_flight.pop(fired["fire_id"], None)
            self.active -= 1
            self.wake()

    async def run(self, chosen: Waiting[Taken]) -> None:
        """One slot's run, the executor's commit protocol in order: run the target (with its
        retries), the outcome acknowledged on the ledger, the fire id marked done, a dead letter
        if it failed, and only then the fired record acknowledged. A crash anywhere before the
        acknowledgement redelivers the record, and the done mark makes that harmless; an
        exception leaves the record unacknowledged (faust would otherwise ack it) for redelivery."""
        stream, event, fired = chosen.item
        fid, job_id, part = fired["fire_id"], fired["job_id"], event.message.partition
        host_held = True  # the host's room is held while its target is called, no longer
        try:
            metrics.FIRE_LATENESS.observe(max(0, now_ms() - fired["nominal_ms"]) / 1000)
            # 1. run
            result, attempts = await self.attempts(fired)
            self.waiting.ended(chosen.host)
            host_held = False
            self.wake()  # the host has room for its next call now, not after the ledger
            reason = f"re-driven by the reconciler ({fired['redrives']})" if fired["redrives"] \
                else result.note
            outcome = "succeeded" if result.ok else "unknown" if result.unknown else "failed"
            metrics.EXECUTIONS.labels(outcome).inc()
            # 2. ledger acknowledged, 3. done
            await self.record(fired, fired["decision"], reason, outcome, part, attempts, result)
            # 4. dead letter
            if not result.ok:
                await self.dead_letter(fired, attempts, result)
            # 5. acknowledged
            await stream.ack(event)
        except Exception:
            log.exception("fire %s of job %s tenant %s partition %d offset %d: outcome not "
                          "recorded; left unacked for redelivery", fid, job_id, fired["tenant"],
                          part, event.message.offset)
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

    def revoked(self, partition: int) -> None:
        """A partition went to another worker: its records are the new owner's to run; the
        ones still waiting here are dropped, unacknowledged (runs already started finish)."""
        self.fence.forget(partition)
        gone = self.waiting.remove_if(lambda taken: taken[1].message.partition == partition)
        for job_id, held in list(self.buffered.items()):
            if held.item[1].message.partition == partition:
                gone.append(self.buffered.pop(job_id))
        for waiting in gone:
            self.in_flight.pop(waiting.item[2]["fire_id"], None)
        if gone:
            log.info("partition %d revoked: %d waiting slots left to its new owner", partition,
                     len(gone))
        self.wake()

    async def attempts(self, fired: dict[str, Any]) -> tuple[targets.CallResult, int]:
        max_attempts = max(1, fired["retry_max_attempts"])
        result = targets.CallResult(False, None, "not attempted")
        kind = fired["target"]["type"]
        if kind == "email":
            # the durable intent: on the changelog before SES is called, so a worker that takes
            # over after a crash knows the send may have happened and does not repeat it
            await self.done.put_acked(fired["fire_id"].encode(), INTENT)
        for attempt in range(1, max_attempts + 1):
            if kind == "campaign":
                ok, note = await self.fan_out(fired)
                result = targets.CallResult(ok, None, None if ok else note, note=note)
            elif kind == "kafka":
                result = await targets.produce_record(self.emitter, fired)
            elif kind == "email":
                result = await asyncio.to_thread(targets.send_email, self.ses, fired,
                                                 (await self._tenants.get()).get(fired["tenant"]))
            else:
                result = await targets.call_webhook(self.client, fired,
                                                    await self.allowed_targets(fired["tenant"]))
            if result.ok or result.final or not retry.retryable(result.status_code):
                return result, attempt
            if attempt < max_attempts:
                await asyncio.sleep(retry.backoff_s(attempt, fired["retry_initial_backoff_s"],
                                                    fired["retry_max_backoff_s"], fired["fire_id"]))
        return result, max_attempts

    async def record(self, fired: dict[str, Any], decision: str, reason: str | None,
                     outcome: str, partition: int, attempts: int = 0,
                     result: targets.CallResult | None = None) -> None:
        """Put the slot's outcome on the ledger and wait for the broker's acknowledgement, then
        mark the fire id done: the done mark never runs ahead of the ledger, so a slot whose
        outcome was lost in a crash is run (or resolved) again rather than taken for done."""
        done = now_ms()
        entry = job_entry(
            fire_id=fired["fire_id"], job=fired, nominal_ms=fired["nominal_ms"],
            decision=decision, reason=reason,
            lateness_ms=max(0, fired["fired_ms"] - fired["nominal_ms"]), epoch=fired["epoch"],
            outcome=outcome, attempts=attempts,
            status_code=result.status_code if result else None,
            error=result.error if result else None,
            message_id=result.message_id if result else None,
            fired_ms=fired["fired_ms"] if attempts else None, completed_ms=done,
        )
        await self.emitter.send(LEDGER, fired["fire_id"], codec().encode("LedgerEntry", entry),
                                partition)
        self.done[fired["fire_id"].encode()] = outcome.encode()
        if outcome == "failed":
            log.warning("fire %s of job %s tenant %s failed after %d attempts: %s",
                        fired["fire_id"], fired["job_id"], fired["tenant"], attempts,
                        result.error if result else None)

    async def dead_letter(self, fired: dict[str, Any], attempts: int,
                          result: targets.CallResult) -> None:
        letter = {
            "fire_id": fired["fire_id"], "job_id": fired["job_id"], "tenant": fired["tenant"],
            "nominal_ms": fired["nominal_ms"], "attempts": attempts,
            "last_error": result.error or "", "last_status_code": result.status_code,
            "failed_ms": now_ms(), "target": fired["target"],
        }
        await self.emitter.send(DLQ, fired["fire_id"], codec().encode("DeadLetter", letter))

    # -- the scheduler's view of the runs (streams.scheduling.scheduler.Runs) -------------------
    def done_mark(self, partition: int, fid: str) -> bytes | None:
        mark: bytes | None = self.done.get_in(partition, fid.encode())
        return mark

    def in_flight_ids(self) -> set[str]:
        return set(self.in_flight)

    def queues(self, ends: dict[int, int]) -> dict[int, ExecutorQueue]:
        """Where the executor stands on each fired partition it has taken records up from,
        against the partition's end (``ends``, read from the broker just before)."""
        return {part: ExecutorQueue(fired_ms, next_offset, ends.get(part))
                for part, (fired_ms, next_offset) in list(self.taken_up.items())}


def register(rt: Runtime, fan_out: FanOut, deciding: Gate) -> Executor:
    """The executor's sub-topology on ``rt``'s app: the fired topic's agent and the done table;
    ``fan_out`` runs a campaign's tick (``streams.campaigns.fanout``); ``deciding`` is the
    scheduler's gate, which a burst's runs wait behind (``streams.scheduling.priority``)."""
    app = rt.app
    fired_topic = rt.topic(FIRED)
    executor = Executor(rt.table(DONE_TABLE), fan_out, bootstrap=rt.settings.bootstrap,
                        worker_id=rt.worker_id, per_host=rt.settings.runs_per_host)
    metrics.RUNS_PER_HOST.set(rt.settings.runs_per_host)

    @app.agent(fired_topic, name=f"{__name__}.execute_fired")
    async def execute_fired(stream: Any) -> Any:
        acking = stream.noack()
        executor.start_dispatcher(deciding)
        async for event in acking.events():
            executor.start_dispatcher(deciding)  # again, if it ever stopped (it logs why)
            await deciding.passed()  # a burst is decided first (streams.scheduling.priority)
            await executor.accept(acking, event)  # into the run queue: the dispatcher runs it

    @app.on_partitions_revoked.connect
    async def _on_revoked(app: Any, revoked: set[Any], **kwargs: Any) -> None:
        for tp in revoked:
            if tp.topic == FIRED.name:
                executor.revoked(tp.partition)

    return executor
