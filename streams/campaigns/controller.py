"""The campaign controller: a campaign's tick becomes one fan-out order per recipient partition.

The executor runs a fired slot whose target is a campaign by calling :meth:`Controller.fan_out`
(wired by ``streams.worker``). Orders are keyed by campaign and written to the recipient
partition they cover, where that partition's owner walks them (``streams.campaigns.walker``).
The orders are deterministic per fire id, so a replayed tick writes the same orders again and
the walkers' registry and chunk table make them harmless.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from streams.campaigns import suppressions
from streams.campaigns.campaign_views import CampaignViews
from streams.records import Fired
from streams.runtime.clock import now_ms
from streams.runtime.codec import codec
from streams.runtime.emit import Emitter
from streams.topology import FANOUT


class Controller:
    def __init__(self, records: CampaignViews, emitter: Callable[[], Emitter],
                 partitions: int) -> None:
        self.records = records
        self.emitter = emitter  # the fan-out's producer, created in the worker's event loop
        self.partitions = partitions  # Settings.partitions: a suppression's address partition

    async def suppress(self, tenant: str, address: str, reason: str, source: str) -> None:
        """Suppress ``address`` for ``tenant`` through the one path (``suppressions``), for the
        executor, which may not import this layer (``streams.worker`` wires it): a number AWS
        answered is on its opt-out list joins the tenant's own."""
        await suppressions.suppress(self.emitter(), suppressions.record(
            tenant, address, reason, source), self.partitions)

    async def fan_out(self, fired: Fired) -> tuple[bool, str]:
        """The campaign controller: one order per recipient partition holding the upload."""
        # the API wrote the campaign's final record just before the job: read up to it (a view
        # that lags once fanned a campaign out to the zero partitions of its pre-upload record)
        if not await self.records.campaigns_caught_up():
            return False, "the campaigns view could not catch up; retried"
        campaign = await self.records.campaign(fired["target"]["campaign_id"] or "")
        if campaign is None:
            return False, f"campaign {fired['target']['campaign_id']} not found"
        if campaign["status"] in ("cancelled", "aborted"):
            return False, f"campaign is {campaign['status']}"
        if campaign["status"] not in ("scheduled", "paused", "sending", "done"):
            return False, (f"campaign {campaign['campaign_id']} is {campaign['status']} in this "
                           "worker's view, not scheduled yet")
        if campaign["recipients"] and not campaign["upload_ranges"]:
            return False, (f"campaign {campaign['campaign_id']} has {campaign['recipients']} "
                           "recipients but no upload ranges in this worker's view yet")
        for span in campaign["upload_ranges"]:
            order = {"campaign_id": campaign["campaign_id"], "tenant": campaign["tenant"],
                     "fire_id": fired["fire_id"], "partition": span["partition"],
                     "start": span["start"], "end": span["end"], "epoch": fired["epoch"],
                     "issued_ms": now_ms()}
            self.emitter().produce(FANOUT, campaign["campaign_id"], codec().encode("Fanout", order),
                                 span["partition"])
        left = await asyncio.get_running_loop().run_in_executor(None, self.emitter().flush)
        if left:
            return False, f"{left} fan-out orders not acknowledged"
        return True, f"fanned out to {len(campaign['upload_ranges'])} recipient partitions"
