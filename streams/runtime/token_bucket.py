"""A token bucket: the one rate limiter of requests, sends and runs (a tenant's API requests, a
campaign's sends, a tenant's fires per second in the executor). Pure. In the runtime layer so
the campaigns and the executor, which may not import each other, share it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TokenBucket:
    rate_per_s: float
    burst: float
    tokens: float = field(default=-1.0)
    updated_s: float = 0.0

    def __post_init__(self) -> None:
        if self.tokens < 0:
            self.tokens = self.burst

    def _refill(self, now_s: float) -> None:
        if now_s > self.updated_s:
            self.tokens = min(self.burst, self.tokens + (now_s - self.updated_s) * self.rate_per_s)
            self.updated_s = now_s

    def take(self, now_s: float, n: float = 1.0) -> bool:
        """Take ``n`` tokens if there are that many; False (and nothing taken) otherwise."""
        self._refill(now_s)
        if self.tokens >= n:
            self.tokens -= n
            return True
        return False

    def set_rate(self, now_s: float, rate_per_s: float, burst: float) -> None:
        """Change the rate and burst from ``now_s`` on: the time until then is refilled at the
        old rate, and what is there is capped at the new burst, so a lowered rate holds at once
        and a raised one is not a free full bucket."""
        self._refill(now_s)
        self.rate_per_s, self.burst = rate_per_s, burst
        self.tokens = min(self.tokens, burst)

    def give_back(self, n: float) -> None:
        """Return ``n`` tokens taken for sends that did not happen (suppressed addresses, a
        stop decided after pacing): a rate limits what is sent, not what was looked at. Capped
        at the burst, so giving back never allows more than a full bucket."""
        self.tokens = min(self.burst, self.tokens + n)

    def wait_s(self, now_s: float, n: float = 1.0) -> float:
        """How long until ``n`` tokens are there."""
        self._refill(now_s)
        return 0.0 if self.tokens >= n else (n - self.tokens) / self.rate_per_s
