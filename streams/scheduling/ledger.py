"""Builds the records decisions are recorded in: LedgerEntry for a job's slot (schemas/ledger.avsc);
the recipient outcomes and the rows Postgres makes of a RecipientOutcomes record (a campaign
chunk's record itself is built by ``streams.campaigns.chunk_outcomes``)."""

from __future__ import annotations

from typing import Any

# every outcome a campaign recipient can end with, in the order the API reports their counts
CAMPAIGN_OUTCOMES = ("sent", "suppressed", "expired_stale", "failed", "unknown", "cancelled")


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


def recipient_rows(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A RecipientOutcomes record as the ledger rows Postgres makes of it, keyed
    ``campaign_id:email`` (the Python side of connectors/ledger.sql: checks and tools that read
    the topic itself compare with the table through this)."""
    rows: dict[str, dict[str, Any]] = {}
    for email, outcome, reason, message_id, attempts in zip(
            record["emails"], record["outcomes"], record["reasons"], record["message_ids"],
            record["attempts"], strict=True):
        rows[f"{record['campaign_id']}:{email}"] = {
            "email": email, "outcome": outcome, "reason": reason or None,
            "message_id": message_id or None, "attempts": attempts,
            "fire_id": record["fire_id"], "epoch": record["epoch"]}
    return rows
