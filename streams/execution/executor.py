"""The executor: runs fired slots against their targets and records outcomes on the ledger.

    cronstream.fired ──▶ [execute_fired] ──▶ webhook / Kafka record ──▶ cronstream.ledger
                               │                                   └──▶ cronstream.dlq (retries spent)
                         table fires-done (fire ids already run: replays are not run again)

Slots run concurrently (up to ``MAX_IN_FLIGHT``) with manual acks, so an offset is committed
only after its slot's outcome is on the ledger: a crash re-runs at most what was in flight
(at-least-once; webhooks carry the fire id so receivers can dedupe). Before anything runs:

- fencing: a record whose epoch is older than one already seen on its partition was written by
  a zombie scheduler after a newer owner took over, and is dropped (counted, logged);
- dedupe: a fire id in the done table, or in flight, is not run again; a running slot's own
  record delivered again is left unacknowledged to that slot (``streams.execution.replays``);
- overlap: the job's policy decides about a slot whose previous run is still in flight.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from streams.adapters import ses
from streams.execution import overlap, targets
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

MAX_IN_FLIGHT = 256

FanOut = Callable[[dict[str, Any]], Awaitable[tuple[bool, str]]]


class Executor:
    """Runs the fired records of this worker's partitions; also the scheduler's ``Runs``: what
    is done (the done table), what runs now, and how far it has taken each partition up."""

    def __init__(self, done: Any, fan_out: FanOut, *, bootstrap: str = "", worker_id: str = "",
                 tenants: Callable[[], TopicView] | None = None) -> None:
        self.done = done  # the done table (a faust table in a worker), co-partitioned with fired
        self.fan_out = fan_out  # a campaign's tick becomes its fan-out (streams.campaigns)
        self.bootstrap, self.worker_id = bootstrap, worker_id
        self.running: dict[str, int] = {}  # job id -> runs in flight
        self.buffered: dict[str, tuple[Any, Any, dict[str, Any]]] = {}  # job -> (stream, event, fired)
        self.in_flight: dict[str, Position] = {}  # fire id -> where its running record was read
        self.taken_up: dict[int, tuple[int, int]] = {}  # partition -> (fired_ms, next offset)
        self.fence = EpochFence()
        self.replays = 0
        self._slots: asyncio.Semaphore | None = None
        self._emitter: Emitter | None = None
        self._client: httpx.AsyncClient | None = None
        # the tenants' SSRF allow-lists, read from their compacted topic
        self._tenants = StartedOnce(tenants or (lambda: TopicView(bootstrap, TENANTS)))
        self._ses: Any = None

    # lazily created inside the worker's event loop
    @property
    def slots(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        return self._slots

    @property
    def emitter(self) -> Emitter:
        if self._emitter is None:
            self._emitter = Emitter(self.bootstrap, f"executor-{self.worker_id}")
        return self._emitter

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(limits=httpx.Limits(max_connections=MAX_IN_FLIGHT))
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
        action = overlap.decide(fired["overlap"], self.running.get(job_id, 0) > 0)
        if action is overlap.Action.SKIP:
            await self.record(fired, "skipped_overlap", "previous run still in flight", "not_run",
                              part)
            await stream.ack(event)
        elif action is overlap.Action.BUFFER:
            # swapped in before any await: the run in flight may end during the awaits below,
            # and its tail starts whatever is buffered then. Buffered after them, this slot was
            # stranded until the reconciler re-drove it two minutes later (CI caught it).
            held = self.buffered.pop(job_id, None)
            self.buffered[job_id] = (stream, event, fired)
            if held is not None:
                await self.record(held[2], "skipped_overlap",
                                  "buffer_one: replaced by a newer slot", "not_run", part)
                await held[0].ack(held[1])
        else:
            await self.start(stream, event, fired)

    async def start(self, stream: Any, event: Any, fired: dict[str, Any]) -> None:
        await self.slots.acquire()
        self.running[fired["job_id"]] = self.running.get(fired["job_id"], 0) + 1
        self.in_flight[fired["fire_id"]] = (event.message.partition, event.message.offset)
        event_task(event, self.run(stream, event, fired))  # table writes need its partition

    async def run(self, stream: Any, event: Any, fired: dict[str, Any]) -> None:
        """One slot's run, the executor's commit protocol in order: run the target (with its
        retries), the outcome acknowledged on the ledger, the fire id marked done, a dead letter
        if it failed, and only then the fired record acknowledged. A crash anywhere before the
        acknowledgement redelivers the record, and the done mark makes that harmless; an
        exception leaves the record unacknowledged (faust would otherwise ack it) for redelivery."""
        fid, job_id, part = fired["fire_id"], fired["job_id"], event.message.partition
        try:
            metrics.FIRE_LATENESS.observe(max(0, now_ms() - fired["nominal_ms"]) / 1000)
            # 1. run
            result, attempts = await self.attempts(fired)
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
            self.slots.release()
        held = self.buffered.pop(job_id, None)
        if held is not None:
            await self.start(*held)

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
                result = await asyncio.to_thread(targets.send_email, self.ses, fired)
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
                        worker_id=rt.worker_id)

    @app.agent(fired_topic, name=f"{__name__}.execute_fired")
    async def execute_fired(stream: Any) -> Any:
        acking = stream.noack()
        async for event in acking.events():
            await deciding.passed()  # a burst is decided first (streams.scheduling.priority)
            await executor.accept(acking, event)

    @app.on_partitions_revoked.connect
    async def _on_revoked(app: Any, revoked: set[Any], **kwargs: Any) -> None:
        for tp in revoked:
            if tp.topic == FIRED.name:
                executor.fence.forget(tp.partition)

    return executor
