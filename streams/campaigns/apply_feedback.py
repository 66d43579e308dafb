"""The campaign side's consumer of SES feedback: bounces and complaints become suppressions,
and an event of a recipient recorded ``unknown`` resolves it to sent. The module is the agent
``apply_ses_feedback`` and what it applies; reading SES's events into the records it consumes is
``streams.campaigns.ses_events``.

    cronstream.ses-feedback ─▶ [apply_ses_feedback] ─▶ cronstream.suppressions (acknowledged)
                                 │                    ─▶ cronstream.campaigns (guard's pauses)
                                 │                    ─▶ cronstream.recipient-outcomes (resolved)
                                 table address-feedback (tenant:email → seen events, soft bounces)
                                 table reputation-window (tenant:pool@partition → recent counts)
                                 table unknown-chunks (chunk → unknown outcomes; reads send-chunks)

Both topics and the table are on the partition of the address (``partition_for(email)``), so the
worker that owns an address's recipients also owns its feedback and its suppression. What an
event does is ``streams.campaigns.bounces.decide`` (pure; its docstring says why a table of seen
keys makes a redelivered or reordered event change nothing twice).

A record of a campaign send then goes to ``streams.campaigns.unknown`` with its chunk, which
resolves that recipient if the chunk recorded it ``unknown`` (the chunk tables are the fan-out's,
on the same partition). Every record then goes to the reputation guard
(``streams.campaigns.guard``), which counts sends, hard bounces and complaints per tenant and pool
and pauses campaigns past a threshold.

Order of the writes: the suppression is acknowledged by the broker before the row that marks the
event seen is written, so a crash between them leaves the event unseen and it is applied again
on redelivery — the same suppression, byte for byte (its ``created_ms`` is when the API
received the event, not when this runs), which changes no state. The other order could mark an
event seen whose suppression was never written.
"""

from __future__ import annotations

import logging
from typing import Any

from streams.campaigns import bounces, guard, suppressions, unknown
from streams.campaigns.campaign_views import CampaignViews
from streams.campaigns.chunk_verdict import DONE
from streams.records import SesFeedback
from streams.runtime import clock, metrics
from streams.runtime.app import Runtime
from streams.runtime.codec import SchemaError, codec
from streams.runtime.emit import Emitter
from streams.topology import (
    ADDRESS_FEEDBACK_TABLE,
    RECIPIENT_OUTCOMES,
    REPUTATION_TABLE,
    SES_FEEDBACK,
)

log = logging.getLogger(__name__)


def policy_of(rt: Runtime) -> bounces.Policy:
    return bounces.Policy(rt.settings.soft_bounce_limit,
                          rt.settings.soft_bounce_window_days * bounces.DAY_MS)


def register(rt: Runtime, emitter: Emitter, records: CampaignViews, send_chunks: Any,
             unknown_chunks: Any) -> None:
    """The feedback agent on ``rt``'s app; ``emitter`` writes the suppressions, the guard's
    pauses and resolved outcomes, ``records`` lists the campaigns it may pause,
    ``send_chunks`` and ``unknown_chunks`` are the walkers' tables."""
    table = rt.table(ADDRESS_FEEDBACK_TABLE)
    policy = policy_of(rt)
    window_ms = rt.settings.unknown_window_s * 1000
    reputation_guard = guard.Guard(guard.thresholds_of(rt.settings.guard_thresholds),
                                   rt.table(REPUTATION_TABLE), records, emitter,
                                   clock.now_ms)

    feedback_topic = rt.topic(SES_FEEDBACK)

    @rt.app.agent(feedback_topic, name=f"{__name__}.apply_ses_feedback")
    async def apply_ses_feedback(stream: Any) -> Any:
        async for event in stream.events():
            try:
                record = codec().decode(event.value)
            except SchemaError:
                log.exception("ses-feedback partition %d offset %d: unreadable; skipped",
                              event.message.partition, event.message.offset)
                continue
            decision = await apply(record, event.key, table, emitter, policy,
                                       rt.settings.partitions)
            await resolve_unknown(record, event.message.partition, send_chunks, unknown_chunks,
                                  emitter, window_ms)
            await reputation_guard.observe(record, decision.kind, event.message.partition)


async def apply(record: SesFeedback, key: bytes, table: Any, emitter: suppressions.Sends,
                policy: bounces.Policy, partitions: int) -> bounces.Decision:
    """Decide one record against its address's row, write the suppression it calls for (to the
    address's partition of ``partitions``, ``Settings.partitions``), then the row (inside the
    record's stream event: the row goes to its partition)."""
    decision = bounces.decide(bounces.AddressState.decode(table.get(key)), record, policy)
    if decision.suppress is not None:
        effect = decision.suppress
        await suppressions.suppress(emitter, suppressions.record(
            record["tenant"], record["email"], effect.reason, "feedback",
            feedback_id=effect.feedback_id, ses_message_id=effect.ses_message_id,
            created_ms=record["received_ms"]), partitions)
        log.info("%s suppressed for tenant %s: %s (SES message %s, feedback %s)",
                 record["email"], record["tenant"], effect.reason, effect.ses_message_id,
                 effect.feedback_id)
    if decision.state is not None:
        table[key] = decision.state.encode()
    metrics.SES_FEEDBACK_APPLIED.labels(record["event_type"], decision.kind).inc()
    return decision


async def resolve_unknown(record: SesFeedback, part: int, send_chunks: Any,
                          unknown_chunks: Any, emitter: Emitter, window_ms: int) -> None:
    """An event of a campaign send: resolve its recipient if its chunk recorded it ``unknown``
    (``streams.campaigns.unknown``). The resolved chunk is acknowledged on the recipient-outcomes
    topic before the table forgets it, so a crash in between resolves it again, the same way."""
    if record["campaign_id"] is None or record["chunk"] is None:
        return
    key = f"{record['campaign_id']}:{record['chunk']}".encode()
    step = unknown.on_event(unknown.Pending.decode(unknown_chunks.get_in(part, key)),
                            send_chunks.get_in(part, key) == DONE, record["email"],
                            record["ses_message_id"], record["event_type"], clock.now_ms(),
                            window_ms)
    if step.emit is not None:
        encoded = codec().encode("RecipientOutcomes", step.emit)
        await emitter.acked(RECIPIENT_OUTCOMES, [(key.decode(), encoded)], part)
        log.info("campaign %s chunk %s: %s resolved from unknown to sent by SES %s event of "
                 "message %s (partition %d)", record["campaign_id"], record["chunk"],
                 record["email"], record["event_type"], record["ses_message_id"], part)
        metrics.UNKNOWN_RESOLVED.inc()
    unknown.apply(unknown_chunks, key, step)
