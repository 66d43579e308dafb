"""A campaign's pacing: each walker's share of its rate (``streams.runtime.token_bucket``, the
one rate limiter), the tenants' round robin, and ``Pacer``, which a chunk waits on for both its
walker's share and the account's rate (``streams.campaigns.fair_share``).

``walker_bucket`` and ``next_tenant`` are pure; ``Pacer`` waits, on the clocks it is given, and
``Turns`` hands a walk's chunks the walker's rate in the order it read them."""

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


class Turns:
    """A walk's chunks take its rate in the order the walker read them (one ticket each).

    Why: a walker keeps several chunks in flight, and each of them waits for the walker's
    tokens. Racing for them, a newly read chunk took the tokens that had built up while the
    older ones slept, and the chunk read first could wait behind twenty others. A partition's
    mail then left in no order, and in two regions that costs recipients: a chunk's reservation
    in the authority is taken as it leaves, so a walker that had sent a partition's last chunk
    early had reserved all of it, and a failover halfway through left the whole rest
    ``unknown`` in the promoted region instead of the chunks in flight (the regions test saw
    every chunk of a 6,000-address campaign inherited with 3,350 sent).

    ``take`` in reading order; ``Turn.wait`` returns once every earlier ticket is released;
    a ticket is released once its chunk is paced, or when it ends without pacing (a chunk
    already done, stopped or cancelled releases it too, or every later chunk would wait)."""

    def __init__(self) -> None:
        self._issued = 0
        self._next = 0  # the lowest ticket not released
        self._released: set[int] = set()
        self._waiting: dict[int, asyncio.Future[None]] = {}

    def take(self) -> Turn:
        turn = Turn(self, self._issued)
        self._issued += 1
        return turn

    async def wait_for(self, ticket: int) -> None:
        if ticket <= self._next:
            return
        waiter = self._waiting[ticket] = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._waiting.pop(ticket, None)

    def release(self, ticket: int) -> None:
        if ticket < self._next or ticket in self._released:
            return
        self._released.add(ticket)
        while self._next in self._released:
            self._released.discard(self._next)
            self._next += 1
        waiter = self._waiting.get(self._next)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class Turn:
    """One chunk's ticket of ``Turns``; releasing it twice is releasing it once."""

    def __init__(self, turns: Turns, ticket: int) -> None:
        self._turns, self.ticket = turns, ticket

    async def wait(self) -> None:
        await self._turns.wait_for(self.ticket)

    def release(self) -> None:
        self._turns.release(self.ticket)


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

    async def pace(self, bucket: TokenBucket, tenant: str, n: int, deadline: int,
                   turn: Turn | None = None) -> bool:
        """Wait for ``turn`` (the walk's earlier chunks paced first), then for ``n`` sends of
        the walker's rate, then of the account's (tenants in turn); the turn is released after.
        False as soon as its turn comes when the walker's rate cannot make room for them before
        the deadline (epoch ms)."""
        if turn is not None:
            await turn.wait()
        try:
            clock = self._clock or asyncio.get_running_loop().time
            while not bucket.take(clock(), n):
                wait = bucket.wait_s(clock(), n)
                if wait > (deadline - self._now_ms()) / 1000:
                    return False
                await self._sleep(wait)
            await self.gate.acquire(tenant, n)
            return True
        finally:
            if turn is not None:
                turn.release()

    def give_back(self, bucket: TokenBucket, n: int) -> None:
        """Tokens paced for addresses that are not sent go back to the campaign's walker and to
        the account's gate: a list with many opted-out addresses is sent at its rate, not
        slower by their share."""
        if n > 0:
            bucket.give_back(n)
            self.gate.give_back(n)
