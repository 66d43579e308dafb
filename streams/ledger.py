"""A job slot's entry on ``cronstream.ledger`` (schemas/ledger.avsc), built in one place for
every side that records a decision: the scheduler's slots decided without a run
(``streams.scheduling.emission``) and the executor's outcomes (``streams.execution.executor``).
Beside ``streams.topology`` because both guarantees write it and neither owns it; the Debezium
JDBC sink upserts it into PostgreSQL (connectors/ledger.sql). Importing it does nothing.
"""

from __future__ import annotations

from streams.records import Fired, Job, LedgerEntry


def job_entry(*, fire_id: str, job: Job | Fired, nominal_ms: int, decision: str,
              reason: str | None, lateness_ms: int, epoch: int, outcome: str,
              attempts: int = 0, status_code: int | None = None, error: str | None = None,
              fired_ms: int | None = None, completed_ms: int | None = None,
              message_id: str | None = None) -> LedgerEntry:
    """The entry of slot ``fire_id``; ``job`` is the job or the fired record (both carry its
    tenant and id)."""
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
