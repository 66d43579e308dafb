"""Builds LedgerEntry records (schemas/ledger.avsc): the one shape every decision is recorded in."""

from __future__ import annotations

from typing import Any


def job_entry(*, fire_id: str, job: dict[str, Any], nominal_ms: int, decision: str,
              reason: str | None, lateness_ms: int, epoch: int, outcome: str,
              attempts: int = 0, status_code: int | None = None, error: str | None = None,
              fired_ms: int | None = None, completed_ms: int | None = None) -> dict[str, Any]:
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
    }
