"""The outcomes of a campaign's recipient chunk, recorded as one RecipientOutcomes record on
``cronstream.recipient-outcomes`` (schemas/recipient_outcomes.avsc) by the walker
(``streams.campaigns.walker``) and resolved from ``unknown`` by SES events
(``streams.campaigns.unknown``).

The outcomes a recipient may end with, and the rows Postgres makes of the record, are the
ledger's (``streams.ledger``): one ledger, a job slot's entries and a campaign's rows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from streams.ledger import CAMPAIGN_OUTCOMES
from streams.records import Campaign, RecipientOutcomes


@dataclass
class ChunkOutcomes:
    """The outcomes of one recipient chunk, gathered recipient by recipient and recorded as one
    RecipientOutcomes record (schemas/recipient_outcomes.avsc).

    Why one record per chunk and not one LedgerEntry per recipient: at 14k emails/s the
    per-recipient records were most of what the broker, Kafka Connect and the workers' own
    ledger consumer carried; Postgres explodes the chunk into one ledger row per recipient
    (connectors/ledger.sql), so readers still see ``campaign_id:email`` rows.
    """

    chunk_id: str
    campaign: Campaign
    fire_id: str
    epoch: int
    emails: list[str] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    message_ids: list[str] = field(default_factory=list)
    attempts: list[int] = field(default_factory=list)

    def add(self, email: str, outcome: str, reason: str | None = None, attempts: int = 0,
            message_id: str | None = None) -> None:
        """One recipient's outcome: sent | suppressed | expired_stale | failed | unknown |
        cancelled (a recipient recorded twice keeps its last outcome, as the ledger would)."""
        if outcome not in CAMPAIGN_OUTCOMES:
            raise ValueError(f"outcome {outcome!r} is not a recipient outcome")
        self.emails.append(email)
        self.outcomes.append(outcome)
        self.reasons.append(reason or "")
        self.message_ids.append(message_id or "")
        self.attempts.append(attempts)

    def add_all(self, emails: list[str], outcome: str, reason: str | None,
                attempts: int = 0) -> None:
        """Every recipient of ``emails`` with the same outcome (a stop, an unknown chunk)."""
        for email in emails:
            self.add(email, outcome, reason, attempts)

    def counts(self) -> Counter[str]:
        return Counter(self.outcomes)

    def record(self, completed_ms: int) -> RecipientOutcomes:
        return {
            "chunk_id": self.chunk_id,
            "tenant": self.campaign["tenant"],
            "campaign_id": self.campaign["campaign_id"],
            "fire_id": self.fire_id,
            "nominal_time": self.campaign["send_at_ms"],
            "epoch": self.epoch,
            "completed_at": completed_ms,
            "emails": self.emails,
            "outcomes": self.outcomes,
            "reasons": self.reasons,
            "message_ids": self.message_ids,
            "attempts": self.attempts,
        }
