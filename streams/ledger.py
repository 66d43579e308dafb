"""Builds LedgerEntry records (schemas/ledger.avsc): the one shape every decision is recorded in."""

from __future__ import annotations

from typing import Any


def job_entry(*, fire_id: str, job: dict[str, Any], nominal_ms: int, decision: str,
              reason: str | None, lateness_ms: int, epoch: int, outcome: str,
              attempts: int = 0, status_code: int | None = None, error: str | None = None,
              fired_ms: int | None = None, completed_ms: int | None = None,
              message_id: str | None = None) -> dict[str, Any]:
    return {
        "record_id": fire_id,
        "kind": "job",
        "tenant": job["tenant"],
        "job_id": job["job_id"],
        "fire_id": fire_id,
        "nominal_time": nominal_ms,
        "decision": decision,
        "reason": reason,
        "lateness_ms": lateness_ms,
        "epoch": epoch,
        "attempts": attempts,
        "outcome": outcome,
        "status_code": status_code,
        "error": error,
        "fired_at": fired_ms,
        "completed_at": completed_ms,
        "message_id": message_id,
        "campaign_id": None,
        "email": None,
    }


def recipient_entry(*, campaign: dict[str, Any], fire_id: str, email: str, outcome: str,
                    reason: str | None, partition_epoch: int, attempts: int = 0,
                    message_id: str | None = None, completed_ms: int | None = None
                    ) -> dict[str, Any]:
    """A campaign recipient's outcome: sent | suppressed | expired_stale | failed | unknown |
    cancelled. Keyed ``campaign_id:email`` so the newest outcome per recipient wins."""
    return {
        "record_id": f"{campaign['campaign_id']}:{email}",
        "kind": "campaign",
        "tenant": campaign["tenant"],
        "job_id": f"campaign-{campaign['campaign_id']}",
        "fire_id": fire_id,
        "nominal_time": campaign["send_at_ms"],
        "decision": "campaign_send",
        "reason": reason,
        "lateness_ms": max(0, (completed_ms or campaign["send_at_ms"]) - campaign["send_at_ms"]),
        "epoch": partition_epoch,
        "attempts": attempts,
        "outcome": outcome,
        "status_code": None,
        "error": None,
        "fired_at": None,
        "completed_at": completed_ms,
        "message_id": message_id,
        "campaign_id": campaign["campaign_id"],
        "email": email,
    }
