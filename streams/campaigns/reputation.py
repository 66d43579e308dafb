"""The reputation guard's arithmetic (issue 30, item 3): bounce and complaint rates over a
sliding window of sends, and when they pause a tenant's campaigns. Pure: no broker, the clock is
passed in.

SES puts an account under review at about 5 % hard bounces or 0.1 % complaints; the guard pauses
a tenant's running campaigns (in the IP pool the events came through) before that, at
``CRONSTREAM_GUARD_BOUNCE_RATE`` (0.04) or ``CRONSTREAM_GUARD_COMPLAINT_RATE`` (0.0008), once at
least ``CRONSTREAM_GUARD_MIN_SENDS`` sends are in the window (``CRONSTREAM_GUARD_WINDOW_S``), so
a handful of sends with one complaint does not trip it.

The denominator is SES's own Send events, not the walkers' chunk outcomes. They arrive on the
same topic (cronstream.ses-feedback) and partition as the bounces and complaints they are the
denominator of, in the agent that already reads those (``apply_ses_feedback``), so numerator and
denominator are counted by one consumer from one log, with no second source to join or keep in
step; and they count what SES counts for its review (a message SES accepted), not what a walker
believes it handed over (a chunk recorded ``unknown`` is neither). The configuration set's event
destination must therefore publish Send events (docs/operations.md).

Where the counts live, and why per partition. Feedback lands on its recipient's partition
(``partition_for(email)``), so a tenant's events are spread over every partition and its
workers. Rather than aggregating them through another topic, each partition keeps its own window
per (tenant, pool) and applies the thresholds to its share: the recipients of a campaign hash
uniformly over the partitions, so each partition's rate is an unbiased sample of the tenant's,
and a tenant whose rate crosses the threshold crosses it on its partitions too (the first to
reach ``min_sends`` trips; ``min_sends`` is per partition, which with 8 partitions means the
tenant-wide sample is about 8 times larger before anything can trip). The price is noise on small
shares, which ``min_sends`` is there to absorb.

A window is a row of buckets (``BUCKETS`` per window, by the event's own time) of sends, hard
bounces and complaints; buckets older than the window before ``now`` are dropped. A bounce whose
send fell out of the window still counts, a slight overestimate at the window's edge, on the safe
side. A trip empties the row: after the operator resumes, the guard needs ``min_sends`` new sends
before it can pause again, rather than pausing at once on the evidence the operator has seen.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streams.adapters import ses
from streams.campaigns import bounces

BUCKETS = 24  # a window is this many buckets: its edge is at most 1/24 of the window off
SEND, BOUNCE, COMPLAINT = 0, 1, 2  # positions in a bucket's counts
CONFIGURATION_SET_PREFIX = ses.CONFIGURATION_SET_PREFIX


@dataclass(frozen=True)
class Thresholds:
    bounce_rate: float = 0.04
    complaint_rate: float = 0.0008
    min_sends: int = 1000
    window_ms: int = 24 * 3600 * 1000

    @property
    def bucket_ms(self) -> int:
        return max(1, self.window_ms // BUCKETS)


@dataclass
class Window:
    """One (tenant, pool)'s counts on one partition: bucket start (ms) -> [sends, bounces,
    complaints]."""

    buckets: dict[int, list[int]] = field(default_factory=dict)

    def encode(self) -> bytes:
        return json.dumps({str(k): v for k, v in sorted(self.buckets.items())},
                          separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> Window:
        if not raw:
            return cls()
        return cls({int(k): [int(n) for n in v] for k, v in json.loads(raw).items()})

    def totals(self) -> tuple[int, int, int]:
        sends = sum(b[SEND] for b in self.buckets.values())
        return (sends, sum(b[BOUNCE] for b in self.buckets.values()),
                sum(b[COMPLAINT] for b in self.buckets.values()))


@dataclass(frozen=True)
class Trip:
    """A crossed threshold: ``kind`` is ``bounce`` or ``complaint``."""

    kind: str
    rate: float
    threshold: float
    count: int
    sends: int

    def reason(self) -> str:
        """The campaign's ``status_reason``: names the rate, the threshold and the sample."""
        return (f"paused by the reputation guard: {self.kind} rate {self.rate:.2%} "
                f"({self.count} of {self.sends} sends in the window) is over "
                f"{self.threshold:.2%}; resume once the list is cleaned")


def counted_as(record: Mapping[str, Any], decision_kind: str) -> int | None:
    """Which count a ``SesFeedback`` record adds to (``SEND``, ``BOUNCE``, ``COMPLAINT``), given
    what ``bounces.decide`` made of it: a redelivered bounce or complaint (``duplicate``,
    ``stale``) adds nothing, so SNS's at-least-once delivery cannot inflate the numerator. Send
    events are not deduplicated (no per-message table for them): a redelivered one adds a send,
    which lowers the rate by the share of duplicates, a small error SNS's rare duplicates bound."""
    if record["event_type"] == "Send":
        return SEND
    if decision_kind != "suppress":
        return None
    what = bounces.effect(record)
    return {"bounce": BOUNCE, "complaint": COMPLAINT}.get(what or "")


def pool_of(record: Mapping[str, Any]) -> str | None:
    """The IP pool of the configuration set ``cronstream-<tenant>_<pool>`` the mail went
    through (or ``cronstream-<tenant>-<pool>``, the form before issue 40, for the record's own
    tenant); None without one (the tenant's window then spans its pools)."""
    config_set = record.get("configuration_set") or ""
    owner = ses.configuration_set_owner(config_set)
    if owner is not None and owner[1] is not None:
        return owner[1] if owner[0] == record["tenant"] else None
    legacy = f"{CONFIGURATION_SET_PREFIX}{record['tenant']}-"
    return config_set[len(legacy):] or None if config_set.startswith(legacy) else None


def row_key(tenant: str, pool: str | None, partition: int) -> bytes:
    """The window's table key. The partition is in it because every partition keeps its own row
    for the same (tenant, pool), and a table's key must be unique across its partitions."""
    return f"{tenant}:{pool or '*'}@{partition}".encode()


def add(window: Window, which: int, at_ms: int, now_ms: int, th: Thresholds) -> Window:
    """``window`` with one more of ``which`` at ``at_ms`` (the event's time), and the buckets
    older than the window before ``now_ms`` dropped; an event that old adds nothing."""
    horizon = now_ms - th.window_ms
    kept = {start: list(c) for start, c in window.buckets.items() if start + th.bucket_ms > horizon}
    if at_ms > horizon:
        start = at_ms - at_ms % th.bucket_ms
        counts = kept.setdefault(start, [0, 0, 0])
        counts[which] += 1
    return Window(kept)


def trip(window: Window, th: Thresholds) -> Trip | None:
    """The threshold ``window`` crosses, complaints first (SES's stricter limit); None below
    ``min_sends`` sends."""
    sends, bounced, complained = window.totals()
    if sends < th.min_sends or sends == 0:
        return None
    for kind, count, threshold in (("complaint", complained, th.complaint_rate),
                                   ("bounce", bounced, th.bounce_rate)):
        if count / sends > threshold:
            return Trip(kind, count / sends, threshold, count, sends)
    return None


def to_pause(campaigns: list[Mapping[str, Any]], tenant: str, pool: str | None
             ) -> list[Mapping[str, Any]]:
    """The campaigns a trip of (``tenant``, ``pool``) pauses: the tenant's running ones
    (``scheduled``, the status the API's pause applies to) in that pool, or in any pool when the
    events named none. Other tenants' campaigns are never touched."""
    return [c for c in campaigns if c["tenant"] == tenant and c["status"] == "scheduled"
            and (pool is None or c["ip_pool"] == pool)]
