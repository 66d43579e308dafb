"""Each tenant's request rate (``requests_per_s`` of its record on the tenants topic), enforced
by one token bucket per tenant (``streams.runtime.token_bucket.TokenBucket``) with a burst of two
seconds' worth.

The bucket is kept across requests, and re-rated when the tenant's record changes its rate: the
tenants view delivers a changed record at any time, and a tenant whose rate was lowered must be
held to it from its next request, not from the API's next restart. Requests are admitted from
the thread pool that runs the API's sync dependencies, so taking a token is under a lock: two
threads reading the same count and both writing it back one lower would admit two requests for
one token.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from streams.runtime.token_bucket import TokenBucket

BURST_S = 2.0  # a tenant may send this many seconds' worth of requests at once


class TenantRates:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        """``clock``: monotonic seconds (injected by tests, which step it instead of sleeping)."""
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, TokenBucket] = {}

    def allow(self, tenant: str, requests_per_s: int) -> bool:
        """Admit one request of ``tenant`` at its rate now, or refuse it (nothing taken)."""
        rate = max(1, requests_per_s)
        with self._lock:
            now = self._clock()
            bucket = self._buckets.get(tenant)
            if bucket is None:
                bucket = self._buckets[tenant] = TokenBucket(rate, BURST_S * rate, updated_s=now)
            elif bucket.rate_per_s != rate:
                bucket.set_rate(now, rate, BURST_S * rate)
            return bucket.take(now)
