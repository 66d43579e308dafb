"""What a walker does with a chunk: resume it from the chunk table, and whether it may still be sent.

Pure so it is tested without a broker. ``stop_reason`` is applied *after* the chunk's pacing wait:
with several chunks in flight a chunk can wait at the rate limiter for many seconds, and a cancel
or the deadline that came meanwhile must stop it.

The chunk table's states (``streams.campaigns.walker``):

- ``intent``: a request may be on its way to SES or accepted by it. Whoever finds a chunk there
  after a crash records it ``unknown`` and never sends it again (prefer a skip to a double).
- ``refused``: SES definitely refused the chunk's last request (throttled, or the connection
  failed before the request was sent), and the chunk is waiting to retry. Nothing of it has
  left, so the next owner sends it. Without this state a crash during the backoff left the
  chunk at ``intent``. In a held-out run (30 % throttled, a worker SIGKILLed) that was 2,600 of
  2,950 ``unknown`` recipients that SES never had.
- ``done``: its outcomes are on the ledger.
"""

from __future__ import annotations

from enum import Enum

from streams.records import Campaign

INTENT, REFUSED, DONE = b"intent", b"refused", b"done"
# the table's state machine for GuardedTable (streams.runtime.guarded_table): intent and refused alternate
# while a chunk retries; done is final, so a zombie's late intent or refusal never undoes it
RANK = {INTENT: 1, REFUSED: 1, DONE: 2}


class Resume(Enum):
    SEND = "send"  # nothing of it has left: admit and send it
    UNKNOWN = "unknown"  # a request may have been accepted: record unknown, never re-send
    # reserved by a region deposed without a hand-over and not replicated as done: it may have
    # been sent there, whatever its state here (docs/regions.md); record unknown, never send
    INHERITED = "inherited"
    SKIP = "skip"  # done


def resume(state: bytes | None, inherited: bool = False) -> Resume:
    """What the chunk table's ``state`` of a chunk tells the walker that reaches it;
    ``inherited``: the chunk lies in a deposed region's reservation
    (``streams.runtime.region.chunk_inherited``)."""
    if state == DONE:
        return Resume.SKIP
    if state == INTENT:
        return Resume.UNKNOWN
    if inherited:
        return Resume.INHERITED
    return Resume.SEND  # never begun, or refused while it waited to retry


def stop_reason(campaign: Campaign, deadline: int, now: int) -> tuple[str, str] | None:
    """(outcome, reason) for a chunk that must not be sent now: its campaign was cancelled or
    aborted, or its deadline has passed; None when it may go."""
    if campaign["status"] in ("cancelled", "aborted"):
        return "cancelled", f"campaign {campaign['status']}"
    if now > deadline:
        return "expired_stale", f"not sent by the deadline send_at + {campaign['send_deadline_s']}s"
    return None
