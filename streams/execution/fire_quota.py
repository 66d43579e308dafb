"""Each tenant's fires per second (``max_fires_per_s`` of its record, issue 40): how many runs
the executor may start for it.

Without it a tenant could create ``max_jobs`` jobs due in the same second and have every one
called at once: the dispatcher shares runs fairly between tenants and caps calls per host
(``streams.execution.dispatch``), but nothing bounded one tenant's rate, so its spike used the
whole box and its webhooks were called as fast as the box could go.

One token bucket per tenant (``streams.runtime.token_bucket``) at this executor's share of the
tenant's rate: each executor holds some of the jobs partitions, and a tenant's slots are spread
over them by job id, so an executor holding ``p`` of ``P`` partitions starts at most ``p / P`` of
the rate (as ``streams.campaigns.warmup.partition_quota`` shares a pool's daily cap), and the
cluster together at most the rate plus one second's burst. The burst is one second's worth (at
least one run), so a tenant that was quiet may start a second's worth at once and no more.

A tenant without a token is passed over by the run queue (its slots wait, nothing is dropped),
and a slot whose turn then comes after its ``max_lateness_s`` is expired with a reason naming
the quota (``held_since``). The rate is read from the tenants' records synchronously (the
executor's hot path cannot wait), at most once a second per tenant. Pure: clocks passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from streams.runtime.token_bucket import TokenBucket

RATE_REFRESH_MS = 1000  # a tenant's record is read again this often (a changed quota holds then)
NEVER = -(2**62)


@dataclass(slots=True)
class _Held:
    """One tenant's bucket, the quota it was rated for and when, and when it last lacked a
    token."""

    bucket: TokenBucket
    rated_ms: int
    held_ms: int = NEVER


class FireQuota:
    def __init__(self, fires_per_s: Callable[[str], int], partitions: int) -> None:
        """``fires_per_s``: a tenant's ``max_fires_per_s`` now (its record's, or the schema's
        default when unknown); ``partitions``: the jobs topic's partitions, of which the
        executor's share is ``held(...)``."""
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        self._fires_per_s = fires_per_s
        self._partitions = partitions
        self.share = 1.0
        self._tenants: dict[str, _Held] = {}

    def held(self, partitions: int) -> None:
        """The executor now holds ``partitions`` of the jobs topic's: every tenant is rated
        anew at its next turn (at least one partition's share, so a rate is never zero)."""
        self.share = max(1, partitions) / self._partitions
        for entry in self._tenants.values():
            entry.rated_ms = NEVER

    def _entry(self, tenant: str, now_ms: int) -> _Held:
        entry = self._tenants.get(tenant)
        if entry is not None and now_ms - entry.rated_ms < RATE_REFRESH_MS:
            return entry
        rate = max(1, self._fires_per_s(tenant)) * self.share
        burst = max(1.0, rate)
        if entry is None:
            entry = self._tenants[tenant] = _Held(TokenBucket(rate, burst, updated_s=now_ms / 1000),
                                                  now_ms)
        else:
            if entry.bucket.rate_per_s != rate:
                entry.bucket.set_rate(now_ms / 1000, rate, burst)
            entry.rated_ms = now_ms
        return entry

    def admits(self, tenant: str, now_ms: int) -> bool:
        """Whether ``tenant`` may start a run now (``spend`` takes the token); if not, it is
        noted as held by its quota from ``now_ms``."""
        entry = self._entry(tenant, now_ms)
        if entry.bucket.wait_s(now_ms / 1000) == 0.0:
            return True
        entry.held_ms = now_ms
        return False

    def spend(self, tenant: str, now_ms: int) -> None:
        """A run of ``tenant`` starts (after ``admits`` said it may)."""
        self._entry(tenant, now_ms).bucket.take(now_ms / 1000)

    def give_back(self, tenant: str) -> None:
        """A slot taken and then not run (its job's overlap policy skipped or held it): the
        quota counts runs started, not slots looked at."""
        entry = self._tenants.get(tenant)
        if entry is not None:
            entry.bucket.give_back(1.0)

    def due_ms(self, tenant: str, now_ms: int) -> int:
        """When ``tenant``'s next token is there (a whole ms later, so that when the dispatcher
        wakes then the token is whole)."""
        wait_s = self._entry(tenant, now_ms).bucket.wait_s(now_ms / 1000)
        return now_ms + int(wait_s * 1000) + 1 if wait_s else now_ms

    def held_since(self, tenant: str, since_ms: int) -> bool:
        """Whether ``tenant`` was held by its quota at ``since_ms`` or later (a slot due then
        that expired waited, at least in part, for its tenant's tokens)."""
        entry = self._tenants.get(tenant)
        return entry is not None and entry.held_ms >= since_ms
