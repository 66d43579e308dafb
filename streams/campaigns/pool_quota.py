"""A dedicated IP pool's warm-up cap, enforced by the walkers: each recipient partition's share
of the pool's cap for the UTC day (``streams.campaigns.warmup``, pure), counted in the
co-partitioned pool-sends table.

Why a counter per (tenant, pool, UTC day, partition): the walker of a partition is the only
writer of its counter, so two walkers (of one campaign or of two sharing the pool) never race for
one count, and the shares add up to the pool's cap however the partitions are spread over workers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from streams.campaigns import warmup
from streams.records import Campaign, Tenant
from streams.runtime.clock import now_ms as wall_ms


def counter_key(tenant: str, pool: str, now_ms: int, partition: int) -> bytes:
    """The pool-sends table's key of a partition's sends through ``pool`` on ``now_ms``'s UTC
    day. Pure."""
    return f"{tenant}:{pool}:{warmup.utc_day(now_ms)}:{partition}".encode()


def wait_s(now_ms: int, deadline: int) -> float:
    """How long a chunk over the cap waits before asking again: at most 5 s, no later than the
    next UTC day (the cap renews) or the deadline (it expires), at least 50 ms. Pure."""
    return min(5.0, warmup.ms_until_next_day(now_ms) / 1000, max(0.05, (deadline - now_ms) / 1000))


class PoolQuota:
    """Reserves a chunk's sends against its pool's warm-up cap. ``tenant`` reads a tenant's
    record (its ``ip_pools`` plans), ``pool_sends`` is the partitions' counters (a faust table
    in a worker), ``partitions`` the recipient partitions' count; ``now_ms`` and ``sleep`` are
    the clock and the wait, passed in so tests need not wait a UTC day."""

    def __init__(self, tenant: Callable[[str], Awaitable[Tenant]], pool_sends: Any,
                 partitions: Callable[[], int], now_ms: Callable[[], int] = wall_ms,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._tenant, self.pool_sends, self._partitions = tenant, pool_sends, partitions
        self._now_ms, self._sleep = now_ms, sleep

    async def reserve(self, campaign: Campaign, part: int, n: int,
                      deadline: int) -> str | None:
        """Reserve ``n`` sends of this partition's share of the campaign's IP pool's warm-up cap
        for today (UTC), waiting for the next day while it is used up. None once reserved (or
        when the pool has no warm-up plan); the reason to expire when the deadline comes first."""
        tenant = await self._tenant(campaign["tenant"])
        plan = tenant.get("ip_pools", {}).get(campaign["ip_pool"])
        if plan is None:
            return None
        while True:
            now = self._now_ms()
            cap = warmup.daily_cap(plan, now)
            key = counter_key(campaign["tenant"], campaign["ip_pool"], now, part)
            used = int(self.pool_sends.get(key) or 0)
            if used + n <= warmup.partition_quota(cap, self._partitions(), part):
                self.pool_sends[key] = str(used + n).encode()
                return None
            if now >= deadline:
                return (f"ip pool {campaign['ip_pool']} reached its warm-up cap of {cap} emails "
                        "today before the deadline")
            await self._sleep(wait_s(now, deadline))
