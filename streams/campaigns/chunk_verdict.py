"""Whether a campaign chunk may still be sent: the rules every walker applies right before a send.

Pure so it is tested without a broker, and applied *after* the chunk's pacing wait: with several
chunks in flight a chunk can wait at the rate limiter for many seconds, and a cancel or the
deadline that came meanwhile must stop it.
"""

from __future__ import annotations

from typing import Any


def stop_reason(campaign: dict[str, Any], deadline: int, now: int) -> tuple[str, str] | None:
    """(outcome, reason) for a chunk that must not be sent now: its campaign was cancelled or
    aborted, or its deadline has passed; None when it may go."""
    if campaign["status"] in ("cancelled", "aborted"):
        return "cancelled", f"campaign {campaign['status']}"
    if now > deadline:
        return "expired_stale", f"not sent by the deadline send_at + {campaign['send_deadline_s']}s"
    return None
