"""Step 2 of a chunk's commit protocol (``streams.campaigns.walker``): what of a chunk may be
sent now. Pause, cancel, the stale cutoff, the tenant's grant and the rate decide what may still
go; the opt-out barrier and the pool's warm-up cap what must not. Every address not admitted gets
its outcome here (stopped, expired, suppressed, over the cap).

Why the order: pace first, decide after. With chunks in flight a chunk may wait for its rate for
many seconds, and the deadline, a cancel and the suppressions must hold when it sends, so they are
judged again after the wait; tokens paced for addresses not sent go back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from streams.adapters import tenants
from streams.campaigns.barrier import OptOutBarrier
from streams.campaigns.chunk_outcomes import ChunkOutcomes
from streams.campaigns.chunk_verdict import stop_reason
from streams.campaigns.pacing import Pacer, Turn
from streams.campaigns.pool_quota import PoolQuota
from streams.records import Campaign, Fanout, RecipientChunk, Tenant
from streams.runtime.clock import now_ms as wall_ms
from streams.runtime.token_bucket import TokenBucket

# a chunk's story is told under the walker's logger, as it was before admission had a module
log = logging.getLogger("streams.campaigns.walker")

Allowed = list[tuple[str, dict[str, str]]]  # the addresses a chunk sends, with their variables
PAUSED_POLL_S = 0.5  # how often a paused campaign's chunk reads the campaign again


class Admission:
    """Admits the chunks of every walker of a worker. ``campaign`` and ``tenant`` read the
    records' views, ``suppressed`` is the co-partitioned table of opted-out addresses."""

    def __init__(self, campaign: Callable[[str], Awaitable[Campaign | None]],
                 tenant: Callable[[str], Awaitable[Tenant]], suppressed: Any,
                 barrier: OptOutBarrier, pacer: Pacer, pool_quota: PoolQuota,
                 now_ms: Callable[[], int] = wall_ms) -> None:
        self._campaign, self._tenant, self.suppressed = campaign, tenant, suppressed
        self.barrier, self.pacer, self.pool_quota = barrier, pacer, pool_quota
        self._now_ms = now_ms

    async def admit(self, order: Fanout, chunk: RecipientChunk, part: int,
                    bucket: TokenBucket, campaign: Campaign, outcomes: ChunkOutcomes,
                    deadline: int, turn: Turn | None = None) -> tuple[Campaign, Allowed]:
        """What of the chunk may be sent now, and the campaign as last read; every other
        address gets its outcome in ``outcomes`` (stopped, expired, suppressed, over the cap).
        ``turn``: the chunk's place in its walk, so the walk's chunks are paced in order."""
        emails: list[str] = chunk["emails"]
        while campaign["status"] == "paused" and self._now_ms() < deadline:
            await asyncio.sleep(PAUSED_POLL_S)
            campaign = await self._campaign(order["campaign_id"]) or campaign
        stop = stop_reason(campaign, deadline, self._now_ms()) or await self.not_granted(campaign)
        tenant = campaign["tenant"]
        # pace for the addresses the chunk will send as the table has them now, so opt-outs
        # cost no tokens; the check that counts comes after the wait (below)
        seen = self.barrier.applied.get(part)
        paid = 0  # tokens taken for this chunk; what is not sent goes back
        allowed: Allowed = []
        opted_out: list[str] = []
        if stop is None:  # a stopped chunk (cancelled, past its deadline) reads no table
            allowed, opted_out = self.split(part, tenant, emails, chunk["vars"])
            if allowed:
                # pace first, decide after: with chunks in flight a chunk may wait here for many
                # seconds, and the deadline, a cancel and the suppressions must hold when it sends
                paced = await self.pacer.pace(bucket, tenant, len(allowed), deadline, turn)
                paid = len(allowed) if paced else 0
                campaign = await self._campaign(order["campaign_id"]) or campaign
                stop = stop_reason(campaign, deadline, self._now_ms()) or (None if paced else (
                    "expired_stale", f"its rate leaves no room to send it by the deadline "
                                     f"send_at + {campaign['send_deadline_s']}s"))
        if stop is not None:
            self.pacer.give_back(bucket, paid)
            outcomes.add_all(emails, *stop)
            return campaign, []
        await self.barrier.caught_up(part)
        if self.barrier.applied.get(part) != seen:  # opt-outs applied (or lifted) while it waited
            allowed, opted_out = self.split(part, tenant, emails, chunk["vars"])
        outcomes.add_all(opted_out, "suppressed", "address is suppressed")
        if allowed and (reason := await self.pool_quota.reserve(campaign, part, len(allowed),
                                                                deadline)):
            outcomes.add_all([email for email, _ in allowed], "expired_stale", reason)
            allowed = []
        # opted out while it waited, or over the pool's cap; an opt-out lifted meanwhile sends
        # unpaid, a few addresses over the rate at most
        self.pacer.give_back(bucket, paid - len(allowed))
        return campaign, allowed

    async def not_granted(self, campaign: Campaign) -> tuple[str, str] | None:
        """("failed", why) when the campaign's sender or IP pool is not (or no longer) the
        tenant's grant (``streams.adapters.tenants.mail_refused``): checked at each chunk, so a
        grant revoked mid-campaign stops its mail, and a record not written by the API (which
        checks at creation) sends nothing in another tenant's name."""
        refused = tenants.mail_refused(await self._tenant(campaign["tenant"]),
                                       campaign["sender"], campaign["ip_pool"])
        if refused is None:
            return None
        log.warning("campaign %s of tenant %s: not sent, %s", campaign["campaign_id"],
                    campaign["tenant"], refused[1])
        return "failed", f"not sent: {refused[1]}"

    def split(self, part: int, tenant: str, emails: list[str], variables: list[dict[str, str]]
              ) -> tuple[Allowed, list[str]]:
        """The chunk's addresses to send (with their variables) and its opted-out ones."""
        allowed: Allowed = []
        opted_out: list[str] = []
        for email, values in zip(emails, variables, strict=True):
            if self.suppressed.get_in(part, f"{tenant}:{email}".encode()) is None:
                allowed.append((email, values))
            else:
                opted_out.append(email)
        return allowed, opted_out
