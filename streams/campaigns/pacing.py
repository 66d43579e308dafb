"""A campaign's pacing: each walker's share of its rate (``streams.runtime.token_bucket``, the
one rate limiter), the tenants' round robin, and ``Pacer``, which a chunk waits on for both its
walker's share and the account's rate (``streams.campaigns.fair_share``).

``walker_bucket`` and ``next_tenant`` are pure; ``Pacer`` waits, on the clocks it is given."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from streams.runtime.clock import now_ms as wall_ms
from streams.runtime.token_bucket import TokenBucket

if TYPE_CHECKING:  # fair_share imports next_tenant from here
    from streams.campaigns.fair_share import FairGate


def walker_bucket(rate_per_s: float, partition: int, partitions: int, chunk: int) -> TokenBucket:
    """One fan-out walker's share of a campaign's rate (a walker sends one partition's chunks).

    Its burst holds at least a whole chunk, or a chunk could never leave. Why the walkers start
    with staggered tokens (partition p of P with ``(p + 1) / P`` of a chunk) instead of full
    buckets: at a rate below a chunk per walker per second, full buckets sent a chunk from every
    partition at once — a 50/s campaign mailed 400 addresses in its first second — and at high
    rates the first second carried twice the rate. Staggered, the partitions' first chunks leave
    one after another, and no second carries more than the rate and one chunk.
    """
    share = rate_per_s / partitions
    return TokenBucket(share, max(float(chunk), share),
                       tokens=chunk * (partition % partitions + 1) / partitions)


def next_tenant(waiting: list[str], last: str | None) -> str:
    """Round-robin: the first waiting tenant after ``last`` in name order (wrapping). Pure."""
    ordered = sorted(waiting)
    if last is None:
        return ordered[0]
    return next((t for t in ordered if t > last), ordered[0])


class Pacer:
    """A chunk's sends paced: first its walker's bucket (one per walk, ``walker_bucket``), then
    the account's gate, shared by every walker of the worker.

    ``clock`` (default: the running loop's, in seconds) is what the buckets are paced on,
    ``now_ms`` the wall clock deadlines are in, ``sleep`` how to wait: tests pass their own and
    read the pace exactly, where timing real waits would depend on the box."""

    def __init__(self, gate: FairGate, clock: Callable[[], float] | None = None,
                 now_ms: Callable[[], int] = wall_ms,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.gate = gate
        self._clock, self._now_ms, self._sleep = clock, now_ms, sleep

    async def pace(self, bucket: TokenBucket, tenant: str, n: int, deadline: int) -> bool:
        """Wait for ``n`` sends of the walker's rate, then of the account's (tenants in turn).
        False at once when the walker's rate cannot make room for them before the deadline
        (epoch ms)."""
        clock = self._clock or asyncio.get_running_loop().time
        while not bucket.take(clock(), n):
            wait = bucket.wait_s(clock(), n)
            if wait > (deadline - self._now_ms()) / 1000:
                return False
            await self._sleep(wait)
        await self.gate.acquire(tenant, n)
        return True

    def give_back(self, bucket: TokenBucket, n: int) -> None:
        """Tokens paced for addresses that are not sent go back to the campaign's walker and to
        the account's gate: a list with many opted-out addresses is sent at its rate, not
        slower by their share."""
        if n > 0:
            bucket.give_back(n)
            self.gate.give_back(n)
