"""Campaign fan-out: one scheduled tick becomes every recipient's email, at most once each.

    cronstream.fanout ───────▶ [walk_recipients]  one walker per (campaign, recipient partition)
        reads cronstream.recipients[p] in the upload's offset range, chunk by chunk (<= 50)
        └─▶ SES SendBulkEmail ──▶ cronstream.recipient-outcomes (one record per chunk, key
                                   campaign:upload:seq; Postgres makes one ledger row per recipient)
    cronstream.suppressions ─▶ [apply_suppressions] ──▶ table suppressed (co-partitioned)
    cronstream.ses-feedback ─▶ [apply_ses_feedback] ──▶ cronstream.suppressions (apply_feedback)
    table send-chunks: chunk → intent | done

At-most-once per (campaign, recipient): a chunk's ``intent`` is on the changelog (flushed)
before SES is called, ``done`` after its outcomes are on the topic. After a crash or a
rebalance, a chunk found ``done`` is skipped and a chunk found at ``intent`` is resolved as
``unknown`` — reported, never re-sent (Borgcron: prefer a skip to a double). Throttling and
connection errors happen before anything leaves, so those are retried with backoff, never dropped.

Before each chunk the walker re-reads the campaign (pause, cancel), checks the stale cutoff
(``send_at + send_deadline_s``), and waits until the suppressions of its partition are applied up
to the partition's end, so an opt-out acknowledged by the API stops every later send.
Campaign sends use their own thread pool: a 50M campaign cannot starve reminder emails.

The parts: ``controller`` (a tick becomes orders), ``walker`` (an order becomes sends, with the
chunk's commit protocol), ``barrier`` (opt-outs first), ``campaign_views`` (the campaigns and
tenants views); this module registers them on the worker's app.
"""

from __future__ import annotations

from typing import Any

from streams.campaigns import apply_feedback
from streams.campaigns.campaign_views import CampaignViews
from streams.campaigns.chunk_verdict import RANK
from streams.campaigns.controller import Controller
from streams.campaigns.walker import Walker
from streams.runtime.app import Runtime
from streams.runtime.codec import codec
from streams.topology import (
    FANOUT,
    POOL_SENDS_TABLE,
    SEND_CHUNKS_TABLE,
    SUPPRESSED_TABLE,
    SUPPRESSIONS,
    UNKNOWN_CHUNKS_TABLE,
)


def register(rt: Runtime) -> Controller:
    """The fan-out's sub-topology on ``rt``'s app: opt-outs into the suppressed table, fan-out
    orders to walkers, and the chunk and pool tables they keep."""
    app = rt.app
    fanout_topic = rt.topic(FANOUT)
    suppressions_topic = rt.topic(SUPPRESSIONS)
    suppressed = rt.table(SUPPRESSED_TABLE)
    records = CampaignViews(rt.settings.bootstrap)
    walker = Walker(rt, rt.table(SEND_CHUNKS_TABLE, rank=RANK),
                    rt.table(UNKNOWN_CHUNKS_TABLE), suppressed,
                    rt.table(POOL_SENDS_TABLE), records)

    # SES events: bounces and complaints into suppressions, unknown recipients resolved
    apply_feedback.register(rt, walker.emitter, records, walker.send_chunks,
                            walker.unknown_chunks)

    @app.agent(suppressions_topic, name=f"{__name__}.apply_suppressions")
    async def apply_suppressions(stream: Any) -> Any:
        """Opt-outs into the co-partitioned table; the applied offset is the walkers' barrier."""
        async for event in stream.events():
            if event.value is None:
                suppressed.pop(event.key, None)
            else:
                suppressed[event.key] = b"1"
            walker.barrier.applied[event.message.partition] = event.message.offset

    @app.agent(fanout_topic, name=f"{__name__}.walk_recipients")
    async def walk_recipients(stream: Any) -> Any:
        acking = stream.noack()
        async for event in acking.events():
            order = codec().decode(event.value)
            walker.start_walk(acking, event, order)  # the walker task inherits the event context

    @app.on_partitions_revoked.connect
    async def _on_revoked(app: Any, revoked: set[Any], **kwargs: Any) -> None:
        for tp in revoked:
            if tp.topic == FANOUT.name:
                walker.revoke(tp.partition)

    return Controller(records, lambda: walker.emitter, rt.settings.partitions)
