"""A request's CPU-bound work, off the event loop and at most a few at a time per tenant.

Some answers cost CPU the request's size does not show: a cron expression whose slots fall only
in a DST gap is searched for decades before it is refused (2.7 s for ``* * 2 * 3 0#2`` in
New York), a label filter reads up to 5,000 of the tenant's jobs, a backfill previews up to
10,001 slots. Run in an ``async`` handler, each held the event loop, and so every other
tenant's requests, for as long as it took (issue 40). Here it runs on the thread pool, and one
tenant's work waits for its own earlier work past ``PER_TENANT`` at a time, so a tenant that
floods such requests takes no more than that many threads (the interpreter switches between
them and the loop every few milliseconds).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi.concurrency import run_in_threadpool

PER_TENANT = 2  # a tenant's CPU-bound request work running at once; the rest waits its turn
T = TypeVar("T")


class TenantWork:
    def __init__(self, per_tenant: int = PER_TENANT) -> None:
        self.per_tenant = per_tenant
        self._gates: dict[str, asyncio.Semaphore] = {}

    def running(self, tenant: str) -> int:
        """How many of ``tenant``'s calls run now (for tests and metrics)."""
        gate = self._gates.get(tenant)
        return 0 if gate is None else self.per_tenant - gate._value  # noqa: SLF001

    async def run(self, tenant: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the thread pool once fewer than ``per_tenant`` of the tenant's run."""
        gate = self._gates.setdefault(tenant, asyncio.Semaphore(self.per_tenant))
        async with gate:
            return await run_in_threadpool(fn, *args)
