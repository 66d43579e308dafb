"""A pool's warm-up cap as the walkers enforce it (``streams.campaigns.pool_quota``): each
partition's share of the day's cap, counted in the pool-sends table, on a fake clock."""

from __future__ import annotations

import asyncio
from typing import Any

from streams.campaigns import pool_quota, warmup
from streams.campaigns.pool_quota import PoolQuota

DAY = warmup.DAY_MS
PLAN = {"warmup_start_ms": 0, "initial_daily_cap": 100, "growth": 2.0, "max_daily_cap": None}
CAMPAIGN = {"tenant": "t1", "ip_pool": "pool-a"}


def quota(start_ms: int, plan: dict[str, Any] | None = PLAN, partitions: int = 4
          ) -> tuple[PoolQuota, dict[bytes, bytes], list[float]]:
    """A PoolQuota on a clock that advances only by its sleeps; its table and the sleeps."""
    table: dict[bytes, bytes] = {}
    slept: list[float] = []

    async def tenant(name: str) -> dict[str, Any]:
        return {"ip_pools": {"pool-a": plan}} if plan is not None else {}

    async def sleep(s: float) -> None:
        slept.append(s)

    return (PoolQuota(tenant, table, lambda: partitions,
                      now_ms=lambda: start_ms + int(sum(slept) * 1000), sleep=sleep),
            table, slept)


def test_a_chunk_within_its_partitions_share_is_counted_on_the_days_key():
    q, table, _ = quota(DAY + 5)  # day 1: a cap of 200, 50 a partition
    assert asyncio.run(q.reserve(CAMPAIGN, 1, 30, deadline=2 * DAY)) is None
    assert asyncio.run(q.reserve(CAMPAIGN, 1, 20, deadline=2 * DAY)) is None
    assert table == {b"t1:pool-a:1:1": b"50"}
    assert pool_quota.counter_key("t1", "pool-a", DAY + 5, 1) == b"t1:pool-a:1:1"


def test_a_chunk_over_the_share_waits_for_the_next_utc_day():
    q, table, slept = quota(DAY - 2_000)  # day 0: a cap of 100, 25 a partition
    assert asyncio.run(q.reserve(CAMPAIGN, 0, 25, deadline=3 * DAY)) is None
    assert asyncio.run(q.reserve(CAMPAIGN, 0, 10, deadline=3 * DAY)) is None
    assert slept == [2.0], "it asks again when the day turns"
    assert table == {b"t1:pool-a:0:0": b"25", b"t1:pool-a:1:0": b"10"}


def test_a_chunk_over_the_share_at_its_deadline_expires_with_the_reason():
    q, table, slept = quota(10_000)
    asyncio.run(q.reserve(CAMPAIGN, 0, 25, deadline=20_000))
    reason = asyncio.run(q.reserve(CAMPAIGN, 0, 1, deadline=20_000))
    assert reason == ("ip pool pool-a reached its warm-up cap of 100 emails today before the "
                      "deadline")
    assert slept == [5.0, 5.0] and table == {b"t1:pool-a:0:0": b"25"}


def test_a_pool_without_a_plan_has_no_cap():
    q, table, _ = quota(0, plan=None)
    assert asyncio.run(q.reserve(CAMPAIGN, 0, 10**6, deadline=0)) is None and table == {}


def test_the_wait_is_at_most_5_s_at_least_50_ms_and_never_past_the_day_or_the_deadline():
    assert pool_quota.wait_s(0, 60_000) == 5.0
    assert pool_quota.wait_s(DAY - 1_000, 60_000 + DAY) == 1.0
    assert pool_quota.wait_s(0, 2_000) == 2.0
    assert pool_quota.wait_s(0, 0) == 0.05
