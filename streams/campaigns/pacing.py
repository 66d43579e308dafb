"""A campaign's pacing: each walker's share of its rate (``streams.runtime.token_bucket``, the
one rate limiter) and the tenants' round robin. Pure."""

from __future__ import annotations

from streams.runtime.token_bucket import TokenBucket


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
