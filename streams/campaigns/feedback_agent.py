"""The campaign side's consumer of SES feedback: bounces and complaints become suppressions.

    cronstream.ses-feedback ─▶ [apply_ses_feedback] ─▶ cronstream.suppressions (acknowledged)
                                 │                    ─▶ cronstream.campaigns (guard's pauses)
                                 table address-feedback (tenant:email → seen events, soft bounces)
                                 table reputation-window (tenant:pool@partition → recent counts)

Both topics and the table are on the partition of the address (``partition_for(email)``), so the
worker that owns an address's recipients also owns its feedback and its suppression. What an
event does is ``streams.campaigns.bounces.decide`` (pure; its docstring says why a table of seen
keys makes a redelivered or reordered event change nothing twice).

Every record then goes to the reputation guard (``streams.campaigns.guard``), which counts sends,
hard bounces and complaints per tenant and pool and pauses campaigns past a threshold.

Order of the writes: the suppression is acknowledged by the broker before the row that marks the
event seen is written, so a crash between them leaves the event unseen and it is applied again
on redelivery — the same suppression, byte for byte (its ``created_ms`` is when the API
received the event, not when this runs), which changes no state. The other order could mark an
event seen whose suppression was never written.
"""

from __future__ import annotations

import logging
from typing import Any

from streams.campaigns import bounces, guard, suppressions
from streams.campaigns.records import CampaignRecords
from streams.runtime import clock, metrics
from streams.runtime.app import Runtime
from streams.runtime.codec import SchemaError, codec
from streams.runtime.emit import Emitter
from streams.topology import ADDRESS_FEEDBACK_TABLE, REPUTATION_TABLE, SES_FEEDBACK

log = logging.getLogger(__name__)


def policy_of(rt: Runtime) -> bounces.Policy:
    return bounces.Policy(rt.settings.soft_bounce_limit,
                          rt.settings.soft_bounce_window_days * bounces.DAY_MS)


def register(rt: Runtime, emitter: Emitter, records: CampaignRecords) -> None:
    """The feedback agent on ``rt``'s app; ``emitter`` writes the suppressions and the guard's
    pauses, ``records`` lists the campaigns it may pause."""
    table = rt.table(ADDRESS_FEEDBACK_TABLE)
    policy = policy_of(rt)
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
            decision = await apply(record, event.key, table, emitter, policy)
            await reputation_guard.observe(record, decision.kind, event.message.partition)


async def apply(record: dict[str, Any], key: bytes, table: Any, emitter: suppressions.Sends,
                policy: bounces.Policy) -> bounces.Decision:
    """Decide one record against its address's row, write the suppression it calls for, then
    the row (inside the record's stream event: the row goes to its partition)."""
    decision = bounces.decide(bounces.AddressState.decode(table.get(key)), record, policy)
    if decision.suppress is not None:
        effect = decision.suppress
        await suppressions.suppress(emitter, suppressions.record(
            record["tenant"], record["email"], effect.reason, "feedback",
            feedback_id=effect.feedback_id, ses_message_id=effect.ses_message_id,
            created_ms=record["received_ms"]))
        log.info("%s suppressed for tenant %s: %s (SES message %s, feedback %s)",
                 record["email"], record["tenant"], effect.reason, effect.ses_message_id,
                 effect.feedback_id)
    if decision.state is not None:
        table[key] = decision.state.encode()
    metrics.SES_FEEDBACK_APPLIED.labels(record["event_type"], decision.kind).inc()
    return decision
