"""What an SES event does to its address (issue 30, "what events do"): pure decisions, no broker.

A Permanent bounce suppresses the address for the tenant (reason ``bounce``), a complaint too
(``complaint``; not a provider's "not-spam" report, which says the opposite). A Transient bounce
is counted, and the ``limit``-th one within ``window_ms`` of each other suppresses (``soft_bounce``).
Undetermined bounces, deliveries, delays, rejects and engagement events change nothing here.
The suppression itself goes through the API's own linearizable path
(``streams.campaigns.suppressions``), written by the ``apply_ses_feedback`` agent
(``streams.campaigns.apply_feedback``).

Idempotency, and why a table of seen keys rather than effects that are idempotent by nature.
SNS delivers at least once and out of order, so one event can arrive twice, days apart. Writing
the same suppression again would look harmless (a compacted topic keeps the last value), but it
is not: an operator may have lifted the suppression in between (``DELETE /v1/suppressions``),
and the redelivery would suppress the address a second time for the same bounce; and a soft
bounce counted twice would suppress an address that bounced softly fewer than ``limit`` times.
So each address keeps the keys of the events that had an effect on it — ``ses_message_id`` +
``event_type`` (the address is the table's key, so the key is message id + type + recipient) —
and an event whose key is there changes nothing. Soft bounces are a set keyed by message id, so
counting them is order-free: any order of the same events suppresses once.

The state lives in one table row per (tenant, address) that ever had an effective event (a small
share of addresses), on the address's partition like its recipients and suppressions. It is kept
bounded: keys and soft bounces older than ``retention_ms`` (at least the window) before the
newest effective event of the address are dropped, and an event older than that is ignored as
stale — SNS gives up redelivering long before (its retry policy spans hours to days).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DAY_MS = 24 * 3600 * 1000
MIN_RETENTION_MS = 30 * DAY_MS  # how long a seen key is kept, at least


@dataclass(frozen=True)
class Policy:
    """``CRONSTREAM_SOFT_BOUNCE_LIMIT`` soft bounces within ``..._WINDOW_DAYS`` suppress."""

    soft_limit: int = 3
    window_ms: int = 7 * DAY_MS

    @property
    def retention_ms(self) -> int:
        return max(MIN_RETENTION_MS, self.window_ms)


@dataclass
class AddressState:
    """One (tenant, address)'s row: the effective events seen, and its recent soft bounces."""

    seen: dict[str, int] = field(default_factory=dict)  # idempotency key -> event_ms
    soft: dict[str, int] = field(default_factory=dict)  # ses_message_id -> event_ms
    newest_ms: int = 0

    def encode(self) -> bytes:
        return json.dumps({"seen": self.seen, "soft": self.soft, "newest_ms": self.newest_ms},
                          sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> AddressState:
        if not raw:
            return cls()
        data = json.loads(raw)
        return cls(dict(data["seen"]), dict(data["soft"]), int(data["newest_ms"]))


@dataclass(frozen=True)
class Suppress:
    """The suppression an event calls for (``streams.campaigns.suppressions.record``'s fields)."""

    reason: str  # bounce | complaint | soft_bounce
    feedback_id: str | None
    ses_message_id: str


@dataclass(frozen=True)
class Decision:
    kind: str  # "ignored" (no effect), "duplicate", "stale", "counted" or "suppress"
    state: AddressState | None = None  # the row to write; None: leave it as it is
    suppress: Suppress | None = None


def idempotency_key(record: Mapping[str, Any]) -> str:
    """The key of an event for its address: SES's message id and the event's type."""
    return f"{record['ses_message_id']}:{record['event_type']}"


def effect(record: Mapping[str, Any]) -> str | None:
    """What a ``SesFeedback`` record does: ``bounce``, ``complaint``, ``soft`` or None."""
    kind = record["event_type"]
    if kind == "Bounce":
        return {"Permanent": "bounce", "Transient": "soft"}.get(record.get("bounce_type") or "")
    if kind == "Complaint":
        return None if (record.get("complaint_type") or "").lower() == "not-spam" else "complaint"
    return None


def soft_limit_reached(times: list[int], limit: int, window_ms: int) -> bool:
    """Whether ``limit`` of ``times`` fall within ``window_ms`` of each other (any order)."""
    ordered = sorted(times)
    return any(ordered[i + limit - 1] - ordered[i] <= window_ms
               for i in range(len(ordered) - limit + 1))


def decide(state: AddressState, record: Mapping[str, Any], policy: Policy) -> Decision:
    """What ``record`` (schemas/ses_feedback.avsc) does to its address, given the address's row.
    The same record decided against the row it produced is a ``duplicate``."""
    what = effect(record)
    if what is None:
        return Decision("ignored")
    key, at = idempotency_key(record), int(record["event_ms"])
    if key in state.seen:
        return Decision("duplicate")
    if at < state.newest_ms - policy.retention_ms:
        return Decision("stale")
    newest = max(state.newest_ms, at)
    horizon = newest - policy.retention_ms
    seen = {k: t for k, t in state.seen.items() if t >= horizon}
    seen[key] = at
    soft = {m: t for m, t in state.soft.items() if t >= horizon}
    feedback_id = record.get("feedback_id")
    if what == "soft":
        soft[record["ses_message_id"]] = at
        if not soft_limit_reached(list(soft.values()), policy.soft_limit, policy.window_ms):
            return Decision("counted", AddressState(seen, soft, newest))
        soft = {}  # these bounces are spent on this suppression; a lifted one starts again
        reason = "soft_bounce"
    else:
        reason = what
    return Decision("suppress", AddressState(seen, soft, newest),
                    Suppress(reason, feedback_id, record["ses_message_id"]))
