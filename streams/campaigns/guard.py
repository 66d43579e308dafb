"""The reputation guard on a worker: counts each SES event into its (tenant, pool) window on the
event's partition and, when a rate crosses its threshold, pauses the tenant's running campaigns
in that pool (``streams.campaigns.reputation`` has the arithmetic and why the windows are per
partition). Called by the ``apply_ses_feedback`` agent for every record, after the record's own
decision (``streams.campaigns.apply_feedback``), so a redelivered bounce is not counted twice.

The pause is the API's own: the next revision of the campaign record, status ``paused``, written
through ``streams.campaigns.lifecycle``; the walkers stop starting sends as they read it, and the
operator resumes with ``POST /v1/campaigns/{id}/resume``. Order of the writes: the pauses are
acknowledged before the window row is emptied, so a crash between them leaves the window as it
was and the redelivered event trips again, finding the campaigns already paused. Two workers
whose partitions trip at the same moment may both write the pause of one campaign (the same
status; the later reason wins); the metric then counts it twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, Protocol

from streams.campaigns import lifecycle, reputation
from streams.campaigns.suppressions import Sends
from streams.records import Campaign
from streams.runtime import metrics

log = logging.getLogger(__name__)


class Campaigns(Protocol):
    """The campaign records as this worker sees them (``streams.campaigns.campaign_views``)."""

    async def campaigns(self) -> list[Campaign]: ...

    async def written(self, campaign: Campaign) -> None: ...


class Guard:
    def __init__(self, thresholds: reputation.Thresholds, table: MutableMapping[bytes, bytes],
                 records: Campaigns, emitter: Sends, now_ms: Callable[[], int]) -> None:
        """``table`` holds the windows, ``records`` the campaign records (a view, told of each
        pause at once so two partitions tripping together do not both write it), ``emitter``
        writes the pauses, ``now_ms`` is the clock."""
        self.thresholds = thresholds
        self.table = table
        self.records = records
        self.emitter = emitter
        self.now_ms = now_ms

    async def observe(self, record: Mapping[str, Any], decision_kind: str, partition: int
                      ) -> list[dict[str, Any]]:
        """Count ``record`` (``decision_kind``: what ``bounces.decide`` made of it) and pause
        what a trip calls for; the campaign records written, if any."""
        which = reputation.counted_as(record, decision_kind)
        if which is None:
            return []
        tenant, pool = record["tenant"], reputation.pool_of(record)
        key = reputation.row_key(tenant, pool, partition)
        window = reputation.add(reputation.Window.decode(self.table.get(key)), which,
                                int(record["event_ms"]), self.now_ms(), self.thresholds)
        crossed = reputation.trip(window, self.thresholds)
        if crossed is None:
            self.table[key] = window.encode()
            return []
        paused = []
        for campaign in reputation.to_pause(await self.records.campaigns(), tenant, pool):
            revision = lifecycle.revised(campaign, self.now_ms(), status="paused",
                                         status_reason=crossed.reason())
            await lifecycle.write(self.emitter, revision)
            await self.records.written(revision)
            paused.append(revision)
            metrics.REPUTATION_PAUSED.labels(tenant, crossed.kind).inc()
            log.warning("reputation guard paused campaign %s of tenant %s (pool %s): %s rate "
                        "%.4f over %.4f (%d of %d sends in the window, partition %d)",
                        campaign["campaign_id"], tenant, pool or "any", crossed.kind,
                        crossed.rate, crossed.threshold, crossed.count, crossed.sends, partition)
        self.table[key] = reputation.Window().encode()
        return paused


def thresholds_of(guard_settings: tuple[float, float, int, int]) -> reputation.Thresholds:
    bounce, complaint, min_sends, window_s = guard_settings
    return reputation.Thresholds(bounce, complaint, min_sends, window_s * 1000)
