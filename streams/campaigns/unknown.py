"""Resolving ``unknown`` recipients from SES's own events (issue 30).

A recipient is recorded ``unknown`` when a request that may have been accepted got no answer:
the call timed out after the request left, or its walker stopped with the chunk at ``intent``
(``streams.campaigns.chunk_verdict``). It is never sent again. SES knows the answer, though:
any event it publishes about a message (Send, Delivery, Bounce, Complaint, DeliveryDelay,
Reject) proves that it accepted the message. Every campaign send is tagged with its campaign and
chunk (``streams.campaigns.walker``), so the event names the chunk, and the recipient becomes
``sent`` with SES's message id. A recipient with no event within the window (a setting) stays
``unknown`` for good and is listed as unresolved (``GET /v1/campaigns/{id}/unknown``).

The table ``unknown-chunks`` (key ``campaign_id:upload_id:seq``, on the chunk's recipient
partition, where the address's feedback lands too) keeps a :class:`Pending` per chunk that
needs one:

- once the chunk is recorded with ``unknown`` recipients: its outcomes record, so an event can
  rewrite it. The recipient-outcomes topic is compacted by chunk, so a resolution is the whole
  chunk again, changed for that recipient;
- while the chunk is not done: the recipients SES's events already reported accepted. An event
  can arrive before the chunk is recorded, because the next owner resolves a crashed walker's
  chunk only after the session timeout and a rebalance. The walker applies them when it records
  the chunk.

An event that arrives in the few milliseconds between the walker reading the table and marking
the chunk done can be lost. Its recipient then stays ``unknown``, and is never sent twice.

Pure: the walker and the feedback agent (``streams.campaigns.apply_feedback``) do the I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

UNKNOWN, SENT = "unknown", "sent"


@dataclass(frozen=True)
class Pending:
    """What the unknown-chunks table keeps for one chunk."""

    record: dict[str, Any] | None = None  # the chunk's outcomes, once recorded with an unknown
    accepted: dict[str, str] = field(default_factory=dict)  # email → SES message id, before that

    def encode(self) -> bytes:
        return json.dumps({"record": self.record, "accepted": self.accepted},
                          sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> Pending | None:
        if raw is None:
            return None
        value = json.loads(raw)
        return cls(value.get("record"), dict(value.get("accepted") or {}))


@dataclass(frozen=True)
class Step:
    """What to do after an event or a recorded chunk. The table write is ``write`` (a
    ``Pending``), or a delete when ``delete`` is set. ``emit`` is a record to put on the
    recipient-outcomes topic first."""

    write: Pending | None = None
    delete: bool = False
    emit: dict[str, Any] | None = None


def _resolve(record: dict[str, Any], accepted: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """``record`` with each ``unknown`` recipient found in ``accepted`` (email → (message id,
    evidence)) turned ``sent``."""
    outcomes, reasons = list(record["outcomes"]), list(record["reasons"])
    message_ids = list(record["message_ids"])
    for i, email in enumerate(record["emails"]):
        if outcomes[i] == UNKNOWN and email in accepted:
            message_ids[i], evidence = accepted[email]
            outcomes[i] = SENT
            reasons[i] = f"resolved: SES reported {evidence} of message {message_ids[i]} " \
                         f"after the send's outcome was unknown"
    return {**record, "outcomes": outcomes, "reasons": reasons, "message_ids": message_ids}


def on_record(pending: Pending | None, record: dict[str, Any]) -> tuple[dict[str, Any], Step]:
    """The walker records ``record`` (the chunk's outcomes): apply the events that came first,
    and keep the record while any recipient is still ``unknown``."""
    if pending is not None and pending.accepted:
        record = _resolve(record, {email: (message_id, "an event")
                                   for email, message_id in pending.accepted.items()})
    if UNKNOWN in record["outcomes"]:
        return record, Step(write=Pending(record))
    return record, Step(delete=pending is not None)


def on_event(pending: Pending | None, chunk_done: bool, email: str, message_id: str,
             event_type: str, now_ms: int, window_ms: int) -> Step:
    """An SES event of ``email``'s message ``message_id`` in this chunk. ``chunk_done``: the
    send-chunks table has the chunk ``done``."""
    if not chunk_done:
        if pending is not None and email in pending.accepted:
            return Step()
        accepted = {**(pending.accepted if pending else {}), email: message_id}
        return Step(write=Pending(None, accepted))
    if pending is None:
        return Step()  # the common case: a chunk recorded without an unknown
    record = pending.record
    if record is None or now_ms > record["completed_at"] + window_ms:
        return Step(delete=True)  # events the walker already applied, or past the window
    if UNKNOWN not in [o for e, o in zip(record["emails"], record["outcomes"], strict=True)
                       if e == email]:
        return Step()
    resolved = _resolve(record, {email: (message_id, f"a {event_type} event")})
    if UNKNOWN in resolved["outcomes"]:
        return Step(write=Pending(resolved), emit=resolved)
    return Step(delete=True, emit=resolved)


def apply(table: Any, key: bytes, step: Step) -> None:
    """The table write of ``step`` (inside the stream event whose partition holds ``key``)."""
    if step.write is not None:
        table[key] = step.write.encode()
    elif step.delete:
        table.pop(key, None)
