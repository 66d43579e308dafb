"""The campaigns and tenants as the fan-out reads them: views of their compacted topics (not
the records' builders: a campaign record's next revision is ``streams.campaigns.lifecycle``).

Shared by the controller and every walker of a worker, started once each, off the event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from streams.records import Campaign, Tenant
from streams.runtime.record_stores import MemoryStore
from streams.runtime.topic_view import StartedOnce, TopicView
from streams.topology import CAMPAIGNS, TENANTS, TopicSpec


class ViewBehind(Exception):
    """A view could not catch up: a missing key is not yet a missing record (retried)."""


class CampaignViews:
    """The campaigns and tenants views of a worker, each started once, on first use."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._views = {topic.name: StartedOnce(lambda topic=topic: TopicView(bootstrap, topic))
                       for topic in (CAMPAIGNS, TENANTS)}

    async def view(self, topic: TopicSpec) -> TopicView:
        """The view of ``topic`` (campaigns or tenants), started once on first use."""
        return await self._views[topic.name].get()

    async def record(self, topic: TopicSpec, key: str) -> dict[str, Any] | None:
        """The view's record of ``key``; a miss is answered only once the view has caught up
        (it may lag: a broker restart, or a record written a moment ago — a tenant created just
        before its campaign once read as having no IP pool plan, and its warm-up cap was not
        applied)."""
        view = await self.view(topic)
        found = view.get(key)
        if found is None:
            if not await asyncio.get_running_loop().run_in_executor(None, view.wait_caught_up):
                raise ViewBehind(f"{topic.name} view behind; {key} not decidable")
            found = view.get(key)
        return found

    async def campaign(self, campaign_id: str) -> Campaign | None:
        return await self.record(CAMPAIGNS, campaign_id)
    async def tenant(self, tenant: str) -> Tenant:
        return await self.record(TENANTS, tenant) or {}

    async def campaigns(self) -> list[Campaign]:
        """Every campaign record the view holds (the reputation guard's candidates to pause)."""
        store = (await self.view(CAMPAIGNS)).store
        assert isinstance(store, MemoryStore)  # this class's views keep their records in memory
        return store.values()

    async def written(self, campaign: Campaign) -> None:
        """Apply a campaign record this process just wrote, so its next read sees it before
        the topic delivers it back (the guard's pause, seen by its other partitions at once)."""
        (await self.view(CAMPAIGNS)).put(campaign["campaign_id"], campaign)

    async def campaigns_caught_up(self) -> bool:
        """Whether the campaigns view has read up to the topic's end (as of now)."""
        view = await self.view(CAMPAIGNS)
        return bool(await asyncio.get_running_loop().run_in_executor(None, view.wait_caught_up))
