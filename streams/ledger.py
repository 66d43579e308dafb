"""The ledger's records, built in one place for every side that records a decision.

A job slot's entry on ``cronstream.ledger`` (schemas/ledger.avsc) is written by the scheduler
for slots decided without a run (``streams.scheduling.emission``) and by the executor for
outcomes (``streams.execution.executor``); a campaign chunk's outcomes go to
``cronstream.recipient-outcomes`` as one record (``streams.campaigns.chunk_outcomes``), which
PostgreSQL explodes into one ledger row per recipient (``recipient_rows`` is that, in Python).
Beside ``streams.topology`` because several guarantees write the ledger and none owns it; the
Debezium JDBC sink upserts both into PostgreSQL (connectors/ledger.sql). Importing it does
nothing.
"""

from __future__ import annotations

from typing import Any

from streams.records import Fired, Job, LedgerEntry, RecipientOutcomes

# every outcome a campaign recipient can end with, in the order the API reports their counts
CAMPAIGN_OUTCOMES = ("sent", "suppressed", "expired_stale", "failed", "unknown", "cancelled")


def job_entry(*, fire_id: str, job: Job | Fired, nominal_ms: int, decision: str,
              reason: str | None, lateness_ms: int, epoch: int, outcome: str,
              attempts: int = 0, status_code: int | None = None, error: str | None = None,
              fired_ms: int | None = None, completed_ms: int | None = None,
              message_id: str | None = None, record_id: str | None = None,
              channel: str | None = None) -> LedgerEntry:
    """The entry of slot ``fire_id``; ``job`` is the job or the fired record (both carry its
    tenant, id and target). ``record_id`` and ``channel``: one channel of a reminder's run, its
    own entry (``streams.execution.reminders.channel_id``); else the slot's, keyed by its fire
    id, its channel the target's type (the ledger's texts beside its emails, docs/sql.md)."""
    return {
        "record_id": record_id or fire_id,
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
        "channel": channel or job["target"]["type"],
    }


def recipient_rows(record: RecipientOutcomes) -> dict[str, dict[str, Any]]:
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
