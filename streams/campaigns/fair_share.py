"""The account's SES send rate, shared round-robin across tenants within a worker.

Each campaign is paced by its own bucket (``max_rate_per_s`` split over the recipient
partitions); on top of that every send takes its tokens from this gate, whose bucket is the
account's max send rate times the share of partitions this worker holds. Waiting requests are
granted one tenant at a time in rotation (``pacing.next_tenant``), FIFO within a tenant, so a
tenant's 50M-recipient campaign and another tenant's 2k-recipient one each get turns instead of
the big one taking the whole account rate.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

from streams.campaigns.pacing import next_tenant
from streams.runtime.token_bucket import TokenBucket


class FairGate:
    def __init__(self, account_rate_per_s: float, share: Callable[[], float],
                 clock: Callable[[], float] | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        """``clock`` (default: the running loop's) and ``sleep`` are the time the bucket is paced
        on and how to wait on it: tests pass a fake pair and read the pace exactly, where timing
        real waits would depend on the box."""
        self.account_rate_per_s = account_rate_per_s
        self._clock, self._sleep = clock, sleep
        self.share = share  # fraction of the recipient partitions this worker holds
        self.bucket = TokenBucket(account_rate_per_s, account_rate_per_s / 10)
        self.waiting: dict[str, deque[tuple[int, asyncio.Future[None]]]] = {}
        self.last: str | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        self.granted: list[str] = []  # tenants in grant order, the last 1000 (for tests, ops)

    async def acquire(self, tenant: str, n: int) -> None:
        """Wait for this tenant's turn and ``n`` tokens of the account rate."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(tenant, deque()).append((n, future))
        if self._dispatcher is None or self._dispatcher.done():
            self._dispatcher = asyncio.ensure_future(self._dispatch())
        await future

    def give_back(self, n: int) -> None:
        """Tokens granted for sends that did not happen go back to the account's bucket."""
        self.bucket.give_back(n)

    async def _dispatch(self) -> None:
        clock = self._clock or asyncio.get_running_loop().time
        while True:
            for tenant in [t for t, q in self.waiting.items() if not q]:
                del self.waiting[tenant]
            if not self.waiting:
                return
            tenant = next_tenant(list(self.waiting), self.last)
            n, future = self.waiting[tenant][0]
            if future.cancelled():  # its walker was revoked while waiting
                self.waiting[tenant].popleft()
                continue
            rate = max(1.0, self.account_rate_per_s * max(0.0, min(1.0, self.share())))
            self.bucket.set_rate(clock(), rate, max(float(n), rate / 10))
            wait = self.bucket.wait_s(clock(), n)
            if wait > 0:
                await self._sleep(wait)
                continue
            self.bucket.take(clock(), n)
            self.waiting[tenant].popleft()
            self.last = tenant
            self.granted = [*self.granted[-999:], tenant]
            if not future.done():
                future.set_result(None)
