"""A fan-out walker: one order's range of a recipient partition, chunk by chunk, each recipient
at most once.

An order (``cronstream.fanout``, written by ``streams.campaigns.controller``) names a recipient
partition and an offset range of the campaign's upload. Its walker reads the range with its own
consumer and sends each chunk (up to 50 addresses, one SES bulk call) through
:meth:`Walker.send_chunk`, whose commit protocol reads top to bottom:

1. resume: a chunk the table has as ``done`` is skipped; one at ``intent`` began sending before
   a crash and is resolved ``unknown``, never re-sent (Borgcron: prefer a skip to a double); one
   at ``refused`` was refused by SES and is sent (``streams.campaigns.chunk_verdict``);
2. admit: pause, cancel, the stale cutoff and the rate (``streams.campaigns.pacing``) decide
   what may still go, the opt-out barrier (``streams.campaigns.barrier``) and the pool's warm-up
   cap (``streams.campaigns.pool_quota``) what must not;
3. intent acknowledged: one of the worker's SES slots taken (``streams.campaigns.ses_slots``:
   its thread builds and signs the request meanwhile, ``ses.Departure``, and holds it at the
   last step before the wire), then ``intent`` is on the table's changelog before anything can
   leave; in two regions only under the region's lease and inside the authority's reservation of the
   chunk, and a chunk a deposed region reserved is ``unknown`` at step 1 (docs/regions.md);
4. fence: the member's lease from its own heartbeats (``streams.runtime.group_lease``), else the
   group coordinator, still gives this member the partition (a zombie's walker stops);
5. send: the held request leaves, the region's lease checked again right before it, its epoch on
   the call's tags; so a crash finds ``intent`` on a chunk whose request left or was being
   handed to its thread, nothing longer (``cronstream_fanout_intent_open_seconds``). A
   definite refusal (throttling, a connection that failed before the request left)
   is acknowledged as ``refused`` before the backoff, then steps 3-5 run again, until the
   deadline; so only a request that may have been accepted leaves the chunk at ``intent``;
6. outcomes acknowledged on ``cronstream.recipient-outcomes``, then ``done``.

At most one live walker per (campaign, partition) in a process (``streams.campaigns.walk_registry``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from streams.adapters import ses
from streams.campaigns import ses_events, unknown, unsubscribe
from streams.campaigns.admission import Admission, Allowed
from streams.campaigns.barrier import OptOutBarrier
from streams.campaigns.campaign_views import CampaignViews
from streams.campaigns.chunk_outcomes import ChunkOutcomes
from streams.campaigns.chunk_verdict import DONE, INTENT, REFUSED, Resume, resume
from streams.campaigns.fair_share import FairGate
from streams.campaigns.ownership import GroupFence, Ownership, describe
from streams.campaigns.pacing import Pacer, Turn, Turns, walker_bucket
from streams.campaigns.pool_quota import PoolQuota
from streams.campaigns.recipients import CHUNK, template_data
from streams.campaigns.reservations import Reservations
from streams.campaigns.ses_slots import SesSlots
from streams.campaigns.walk_registry import (
    Fenced,
    Start,
    Walkers,
    cancel_requested,
    first_failure,
    stop_if_cancelled,
)
from streams.records import Campaign, Fanout, RecipientChunk
from streams.runtime import metrics
from streams.runtime.app import Runtime
from streams.runtime.authority import LeaseLost, Store
from streams.runtime.backoff import backoff_s
from streams.runtime.clock import now_ms
from streams.runtime.codec import codec
from streams.runtime.emit import Emitter
from streams.runtime.group_lease import Member
from streams.runtime.kafka_config import client_config
from streams.runtime.region import EPOCH_TAG, chunk_inherited
from streams.runtime.token_bucket import TokenBucket
from streams.topology import APP_ID, FANOUT, RECIPIENT_OUTCOMES, RECIPIENTS

log = logging.getLogger(__name__)

# chunks a walker has in flight at once: a chunk spends most of its time waiting on the broker
# (the barrier, the intent's flush, the fence, the ledger's acknowledgement) and on SES; with 4
# the two workers left a fifth of the box idle during a campaign (bench.fanout's CPU figures)
CHUNKS_IN_FLIGHT = 8
WALK_THREADS = 16  # the walkers' consume() calls and the opt-out barrier's offset lookups
PRE_FENCE_AGE_S = 0.1  # how old the fence's answer before a chunk's intent may be
MAX_THROTTLE_RETRIES = 1000
LEASE_WAIT_S = 1.0  # a reservation refused or unanswered is asked again after this
UNKNOWN_REASONS = {
    Resume.UNKNOWN: "at-most-once: the send began before a crash and its outcome is unknown; "
                    "not re-sent",
    Resume.INHERITED: "region failover: reserved by the deposed region and not replicated as "
                      "done, so it may have been sent there; not sent again (at-most-once)",
}


class Walker:
    """Every walker of this worker: the registry of live ones, and what they share (the chunk,
    suppressed and pool tables, the records' views, the opt-out barrier, the account's rate)."""

    def __init__(self, rt: Runtime, send_chunks: Any, unknown_chunks: Any, suppressed: Any,
                 pool_sends: Any, records: CampaignViews) -> None:
        self.settings, self.worker_id = rt.settings, rt.worker_id
        self.member = rt.member
        # the co-partitioned tables (faust tables in a worker): each chunk's intent/done here;
        # the opted-out addresses and each dedicated IP pool's sends of the day are admission's
        self.send_chunks = send_chunks
        # the chunks recorded with unknown recipients, until SES's events resolve them
        # (streams.campaigns.unknown)
        self.unknown_chunks = unknown_chunks
        self.records = records
        self._pool = ThreadPoolExecutor(WALK_THREADS, thread_name_prefix="campaign-walk")
        self.ses_slots = SesSlots()
        self.barrier = OptOutBarrier(rt.settings.bootstrap, rt.settings.partitions, self._pool)
        self._emitter: Emitter | None = None
        self._ses: Any = None
        self.walkers = Walkers()
        self.fence = GroupFence(lambda: describe(self.settings.bootstrap, APP_ID), rt.group_lease)
        self.account_rate_per_s = rt.settings.ses_max_rate_per_s
        # two regions: a chunk begins only under the region's lease and inside a reservation
        # of the authority; chunks a deposed region reserved are unknown here (docs/regions.md)
        self.region = rt.region
        self.partitions = rt.settings.partitions  # the cluster's (keys hash to it)
        self.reservations = Reservations(
            Store(rt.settings.authority_dsn) if rt.settings.region else None, rt.region,
            self.partitions, rt.settings.region_reserve_chunks)
        health, count = rt.health, self.partitions
        gate = FairGate(self.account_rate_per_s, lambda: max(1, len(health.partitions)) / count)
        self.admission = Admission(records.campaign, records.tenant, suppressed, self.barrier,
                                   Pacer(gate), PoolQuota(records.tenant, pool_sends,
                                                          lambda: count))

    def start_walk(self, stream: Any, event: Any, order: Fanout) -> None:
        """Walk an order, after any revoked walker of its (campaign, partition) has wound down
        (``streams.campaigns.walk_registry``); an order a live walker already holds is
        acknowledged and dropped."""
        key = (order["campaign_id"], order["partition"])
        started = self.walkers.start(key, lambda: self.walk(stream, event, order),
                                     event.message.offset)
        if started is Start.STARTED:
            log.info("campaign %s partition %d: walking the order at offset %d (recipient offsets "
                     "%d..%d)", *key, event.message.offset, order["start"], order["end"])
        elif started is Start.REDELIVERED:
            log.info("campaign %s partition %d: order at offset %d delivered again while its "
                     "walker runs; left to that walker to acknowledge", *key, event.message.offset)
        elif started is Start.DUPLICATE:
            log.info("campaign %s partition %d: order at offset %d duplicates a live walker; "
                     "acknowledged", *key, event.message.offset)
            asyncio.ensure_future(stream.ack(event))
        elif started is Start.QUEUED:
            log.info("campaign %s partition %d: order at offset %d redelivered; walks once the "
                     "revoked walker has wound down", *key, event.message.offset)

    def revoke(self, partition: int) -> None:
        """Stop the walkers of a partition this worker no longer owns; its next owner (perhaps this
        worker again) resumes from the chunk table."""
        for campaign_id, part in self.walkers.revoke(partition):
            log.warning("campaign %s partition %d revoked: walker stopped", campaign_id, part)

    async def walk(self, stream: Any, event: Any, order: Fanout) -> None:
        """Walk the order's offset range, then acknowledge it. A failure (a broker hiccup, an SES
        client error) is retried from the chunk table after a backoff, so done chunks are
        skipped and a chunk caught mid-send is resolved unknown: a failed walker never leaves its
        partition stalled until the next rebalance. Only a revocation stops it unacknowledged."""
        part = order["partition"]
        # the fence asks for this member in the generation the order was fetched in, never a
        # later one of this process
        member = self.member(event.message.generation_id)
        failures = 0
        while True:
            try:
                await self._walk_range(order, event.message.offset, member)
                break
            except asyncio.CancelledError:
                return
            except Fenced as exc:
                log.error("%s; walker stopped, order left unacknowledged", exc)
                return
            except Exception:
                if cancel_requested():
                    return  # revoked as a chunk failed: the TaskGroup raised the chunk's error
                failures += 1
                log.exception("fanout of campaign %s partition %d (order offset %d) failed; "
                              "walking again from the chunk table (failure %d)",
                              order["campaign_id"], part, event.message.offset, failures)
                await asyncio.sleep(backoff_s(min(failures, 6), 1.0, 30.0,
                                                    f"{order['campaign_id']}:{part}"))
        await stream.ack(event)

    async def _walk_range(self, order: Fanout, order_offset: int, member: Member) -> None:
        part = order["partition"]
        campaign = await self.records.campaign(order["campaign_id"])
        if campaign is None:
            log.error("fanout for unknown campaign %s (partition %d order offset %d); dropped",
                      order["campaign_id"], part, order_offset)
            return
        consumer = Consumer({**client_config(self.settings.bootstrap),
                             "group.id": f"fanout-{uuid.uuid4()}", "enable.auto.commit": False})
        consumer.assign([TopicPartition(RECIPIENTS.name, part, order["start"])])
        rate = min(campaign["max_rate_per_s"] or self.account_rate_per_s, self.account_rate_per_s)
        bucket = walker_bucket(rate, part, self.partitions, CHUNK)
        inherited = (await self.reservations.inherited(order["campaign_id"])).get(part)
        position = order["start"]
        loop = asyncio.get_running_loop()
        fetch: asyncio.Future[Any] | None = None
        window = asyncio.Semaphore(CHUNKS_IN_FLIGHT)
        turns = Turns()  # the chunks in flight take the walker's rate in the order read
        try:
            async with asyncio.TaskGroup() as chunks:
                while position < order["end"]:
                    fetch = loop.run_in_executor(self._pool, consumer.consume, 200, 1.0)
                    batch = await asyncio.shield(fetch)
                    for msg in batch:
                        if msg.error() or msg.offset() >= order["end"]:
                            continue
                        position = msg.offset() + 1
                        chunk = codec().decode(msg.value())
                        if chunk["upload_id"] == campaign["upload_id"]:
                            await window.acquire()
                            turn = turns.take()
                            sending = self.send_chunk(order, chunk, part, bucket, member,
                                                      inherited, turn)
                            # a chunk that ends unpaced (done, stopped, cancelled) gives its
                            # turn up here, or the chunks read after it would wait forever
                            chunks.create_task(sending).add_done_callback(
                                lambda _, turn=turn: (turn.release(), window.release()))
                        campaign = await self.records.campaign(order["campaign_id"]) or campaign
                    if batch:
                        position = max(position, max(m.offset() for m in batch) + 1)
        except ExceptionGroup as failed:  # a chunk failed and its siblings were cancelled
            raise first_failure(failed) from None
        finally:
            # a cancelled walker's consume() may still run on the pool: close after it returns
            if fetch is not None and not fetch.done():
                await asyncio.wait([fetch])
            consumer.close()
        await asyncio.get_running_loop().run_in_executor(None, self.emitter.flush)
        log.info("campaign %s partition %d: walked offsets %d..%d", order["campaign_id"],
                 part, order["start"], order["end"])

    async def send_chunk(self, order: Fanout, chunk: RecipientChunk, part: int,
                         bucket: TokenBucket, member: Member, inherited: int | None = None,
                         turn: Turn | None = None) -> None:
        """One chunk's commit protocol, in the order of the module's docstring; ``inherited``:
        the highest chunk of the partition a deposed region may have sent; ``turn``: its place
        in the walk, so the walk's chunks take the walker's rate in order (``Turns``)."""
        key = f"{chunk['campaign_id']}:{chunk['upload_id']}:{chunk['seq']}".encode()
        state = self.send_chunks.get_in(part, key)
        emails: list[str] = chunk["emails"]
        # 1. resume
        resumed = resume(state, chunk_inherited(chunk["seq"], inherited))
        if resumed is Resume.SKIP:
            # a zombie's late intent is the changelog's last word: say done again before compaction
            if key in self.send_chunks.regressions:
                self.send_chunks.regressions.discard(key)
                self.send_chunks[key] = DONE
            return
        await self.region.held()  # a region without its lease decides nothing
        campaign = await self.records.campaign(order["campaign_id"])
        assert campaign is not None
        outcomes = ChunkOutcomes(key.decode(), campaign, order["fire_id"], order["epoch"])
        if resumed in (Resume.UNKNOWN, Resume.INHERITED):
            why = UNKNOWN_REASONS[resumed]
            log.warning("campaign %s chunk %s partition %d: %s; %d recipients resolved as "
                        "unknown, not re-sent", campaign["campaign_id"], key.decode(), part,
                        why, len(emails))
            outcomes.add_all(emails, "unknown", why)
            await self._finish(key, outcomes, part)
            return
        # 2. admit
        deadline = campaign["send_at_ms"] + campaign["send_deadline_s"] * 1000
        campaign, allowed = await self.admission.admit(order, chunk, part, bucket, campaign,
                                                       outcomes, deadline, turn)
        if allowed:
            # 3.-5. intent, fence, send; again after each refusal
            await self._send(outcomes, campaign, order, chunk, part, allowed, deadline,
                             key, member)
        # 6. outcomes acknowledged, then done
        await self._finish(key, outcomes, part)

    async def _intent_and_fence(self, key: bytes, part: int, member: Member,
                                campaign: Campaign) -> float:
        """Steps 3 and 4 of a send attempt, the caller holding an SES slot: ``intent`` durable
        before anything can leave, then the member's lease or the coordinator still gives this
        member the partition (a zombie's walker stops). Settled first again: the group may have
        begun to rebalance while the chunk waited for its slot (a fresh answer is shared, so
        this costs nothing in a steady send). Returns when the intent was acknowledged
        (``time.perf_counter``)."""
        await self._settled(key, part, member, campaign)
        await self.send_chunks.put_acked(key, INTENT)
        acked_at = time.perf_counter()
        stop_if_cancelled()  # an await can swallow the walker's cancellation
        await self._fence(key, part, member, campaign, "after the intent")
        return acked_at

    async def _settled(self, key: bytes, part: int, member: Member,
                       campaign: Campaign) -> None:
        """The fence asked before the slot and the intent as well. During a rebalance it waits
        for the group to settle, and a chunk waiting there with its intent written is resolved
        ``unknown`` when its walker is revoked, though nothing left. A fault run showed it:
        chunks that woke from a throttling backoff as the group began to rebalance. Asked
        first, the wait happens while the chunk is still unbegun or ``refused``, and holds no
        slot. An answer up to 0.1 s old will do (it only waits out a rebalance), so in a steady
        send it costs no round of its own."""
        await self._fence(key, part, member, campaign, "before the intent", PRE_FENCE_AGE_S)

    async def _fence(self, key: bytes, part: int, member: Member, campaign: Campaign,
                     when: str, max_age_s: float | None = None) -> None:
        if await self.fence.check(FANOUT.name, part, member, max_age_s) is Ownership.NOT_OWNED:
            metrics.FANOUT_FENCED.inc()
            raise Fenced(f"campaign {campaign['campaign_id']} chunk {key.decode()} partition "
                         f"{part}: the coordinator gave the partition to another worker "
                         f"({when}); not sent (its new owner resolves the chunk)")

    async def _send(self, outcomes: ChunkOutcomes, campaign: Campaign,
                    order: Fanout, chunk: RecipientChunk, part: int,
                    allowed: Allowed, deadline: int, key: bytes, member: Member) -> None:
        base, secret = self.settings.api_url, self.settings.unsubscribe_secret
        entries = [ses.BulkEntry(email, unsubscribe.headers(secret, base, campaign["tenant"], email,
                                                            campaign["campaign_id"]),
                                 template_data(variables)) for email, variables in allowed]
        tags = {ses_events.TENANT_TAG: campaign["tenant"],  # so its SES events find their chunk
                ses_events.CAMPAIGN_TAG: campaign["campaign_id"],
                ses_events.CHUNK_TAG: ses_events.chunk_tag(chunk["upload_id"], chunk["seq"])}
        attempt = 0
        while True:
            epoch = await self._under_lease(campaign["campaign_id"], part, chunk["seq"])
            attempt += 1
            # the slot is held from before the intent until the chunk is past it (answered, or
            # ``refused`` acknowledged): a crash finds at most SES_SLOTS chunks of a worker at
            # ``intent``, each with its request out or about to leave
            await self._settled(key, part, member, campaign)  # a rebalance waited out slotless
            async with self.ses_slots.slot() as slot:
                # the request is built and signed while the intent is written, and leaves on
                # the go: only the hand-over to its thread stands between the two
                departure = ses.Departure(partial(self._still_under, epoch))
                call = slot.start(partial(self._send_bulk, campaign, entries, tags, epoch,
                                          departure))
                try:
                    departure.go(await self._intent_and_fence(key, part, member, campaign))
                except BaseException:
                    departure.withhold()
                    raise
                sent = await call
                if departure.open_s is not None:
                    metrics.FANOUT_INTENT_OPEN.observe(departure.open_s)
                refused = sent is None or sent[0].outcome in (ses.Outcome.THROTTLED,
                                                              ses.Outcome.TRANSIENT)
                if refused:
                    # nothing left: say so before waiting, so a crash now leaves it to be sent
                    await self.send_chunks.put_acked(key, REFUSED)
            if sent is None:  # the lease ended before the request left: none left
                log.warning("campaign %s chunk %s partition %d: the region's lease ended before "
                            "the request; refused, sent once it holds again",
                            campaign["campaign_id"], key.decode(), part)
                attempt -= 1
                continue
            call, results = sent
            if call.outcome is ses.Outcome.SENT:
                for (email, _), result in zip(allowed, results, strict=True):
                    accepted = result.outcome is ses.Outcome.SENT
                    outcomes.add(email, "sent" if accepted else "unknown" if result.outcome is
                                 ses.Outcome.UNKNOWN else "failed",
                                 None if accepted else result.error, attempt, result.message_id)
                return
            if refused and attempt < MAX_THROTTLE_RETRIES and now_ms() < deadline:
                if call.outcome is ses.Outcome.THROTTLED:
                    metrics.SES_THROTTLES.inc()
                await asyncio.sleep(backoff_s(min(attempt, 8), 0.2, 10.0,
                                                    f"{order['fire_id']}:{part}"))
                continue
            outcome = {ses.Outcome.UNKNOWN: "unknown", ses.Outcome.PERMANENT: "failed"}.get(
                call.outcome, "expired_stale" if now_ms() >= deadline else "failed")
            log.warning("campaign %s partition %d: bulk send %s after %d attempts: %s",
                        campaign["campaign_id"], part, outcome, attempt, call.error)
            outcomes.add_all([email for email, _ in allowed], outcome, call.error, attempt)
            return

    async def _under_lease(self, campaign_id: str, part: int, seq: int) -> int:
        """The epoch, once the region's lease holds and the authority's reservation covers the
        chunk (waits while either is refused)."""
        while True:
            epoch = await self.region.held()
            try:
                await self.reservations.cover(campaign_id, part, seq, epoch)
                return epoch
            except LeaseLost as exc:
                log.warning("%s; waiting for the lease", exc)
                await asyncio.sleep(LEASE_WAIT_S)
            except Exception:
                log.exception("campaign %s partition %d seq %d: the authority did not answer the "
                              "reservation; asked again", campaign_id, part, seq)
                await asyncio.sleep(LEASE_WAIT_S)

    def _send_bulk(self, campaign: Campaign, entries: list[ses.BulkEntry], tags: dict[str, str],
                   epoch: int, departure: ses.Departure
                   ) -> tuple[ses.SendResult, list[ses.SendResult]] | None:
        """The SES call, on its slot's thread: built under the region's ``epoch`` (on the call's
        tags) and sent on the departure's go, the lease checked right before it leaves (None:
        withheld or the lease ended, nothing sent)."""
        try:
            return ses.send_bulk(
                self.ses, sender=campaign["sender"], subject=campaign["subject"],
                text=campaign["text"], html=campaign["html"], entries=entries,
                configuration_set=ses.configuration_set(campaign["tenant"], campaign["ip_pool"]),
                common_headers=unsubscribe.ONE_CLICK,
                tags={**tags, EPOCH_TAG: str(epoch)} if epoch else tags, departure=departure)
        except ses.Withheld:
            return None

    def _still_under(self, epoch: int) -> bool:
        """Whether the region's lease still holds under ``epoch`` (on the request's thread)."""
        try:
            return self.region.check() == epoch
        except LeaseLost:
            return False

    async def _finish(self, key: bytes, outcomes: ChunkOutcomes, part: int) -> None:
        """``done`` only once the chunk's outcomes are on the topic: a crash in between leaves
        the chunk at ``intent``, resolved ``unknown`` by whoever walks it next. SES events that
        came before the record resolve its unknown recipients; a chunk left with some is kept
        in the unknown-chunks table for the events still to come (``streams.campaigns.unknown``)."""
        raw = self.unknown_chunks.get_in(part, key)
        record, step = unknown.on_record(unknown.Pending.decode(raw), outcomes.record(now_ms()))
        encoded = codec().encode("RecipientOutcomes", record)
        await self.emitter.acked(RECIPIENT_OUTCOMES, [(outcomes.chunk_id, encoded)], part)
        for outcome, n in Counter(record["outcomes"]).items():
            metrics.CAMPAIGN_SENDS.labels(outcome).inc(n)
        unknown.apply(self.unknown_chunks, key, step)
        self.send_chunks[key] = DONE

    @property
    def emitter(self) -> Emitter:
        if self._emitter is None:
            self._emitter = Emitter(self.settings.bootstrap, f"fanout-{self.worker_id}",
                                    **{"linger.ms": 10})
        return self._emitter

    @property
    def ses(self) -> Any:
        if self._ses is None:
            self._ses = ses.client(self.settings.ses_endpoint_url, self.settings.aws_region)
        return self._ses
