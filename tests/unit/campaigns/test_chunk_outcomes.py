"""The chunk outcome record (``streams.campaigns.chunk_outcomes``): what a walker records for up
to 50 recipients in one Kafka record, and the ledger rows Postgres makes of it."""

from __future__ import annotations

import pytest

from streams.campaigns.chunk_outcomes import ChunkOutcomes
from streams.ledger import recipient_rows
from streams.runtime.codec import codec

CAMPAIGN = {"campaign_id": "c1", "tenant": "t1", "send_at_ms": 1_700_000_000_000}


def chunk() -> ChunkOutcomes:
    return ChunkOutcomes("c1:u1:7", CAMPAIGN, "campaign-c1@2023-11-14T22:13:20Z", 3)


def test_a_chunk_record_carries_each_recipient_and_round_trips_its_schema():
    outcomes = chunk()
    outcomes.add("a@x.org", "sent", None, 1, "msg-a")
    outcomes.add("b@x.org", "suppressed", "address is suppressed")
    outcomes.add("c@x.org", "failed", "MessageRejected", 2)
    record = codec().decode(codec().encode("RecipientOutcomes", outcomes.record(1_700_000_005_000)))
    assert record["chunk_id"] == "c1:u1:7" and record["epoch"] == 3
    assert record["emails"] == ["a@x.org", "b@x.org", "c@x.org"]
    rows = recipient_rows(record)
    assert rows["c1:a@x.org"] == {"email": "a@x.org", "outcome": "sent", "reason": None,
                                  "message_id": "msg-a", "attempts": 1,
                                  "fire_id": "campaign-c1@2023-11-14T22:13:20Z", "epoch": 3}
    assert rows["c1:b@x.org"]["reason"] == "address is suppressed"
    assert rows["c1:b@x.org"]["message_id"] is None
    assert (rows["c1:c@x.org"]["outcome"], rows["c1:c@x.org"]["attempts"]) == ("failed", 2)
    assert outcomes.counts() == {"sent": 1, "suppressed": 1, "failed": 1}


def test_a_stop_records_every_recipient_of_the_chunk_with_its_reason():
    outcomes = chunk()
    outcomes.add_all(["a@x.org", "b@x.org"], "expired_stale", "past the deadline")
    rows = recipient_rows(outcomes.record(0))
    assert {r["outcome"] for r in rows.values()} == {"expired_stale"}
    assert {r["reason"] for r in rows.values()} == {"past the deadline"}
    assert outcomes.counts() == {"expired_stale": 2}


def test_an_outcome_the_ledger_does_not_know_is_refused():
    with pytest.raises(ValueError, match="'delivered' is not a recipient outcome"):
        chunk().add("a@x.org", "delivered")


def test_arrays_that_do_not_line_up_are_an_error_not_a_silent_truncation():
    record = chunk().record(0) | {"emails": ["a@x.org"], "outcomes": []}
    with pytest.raises(ValueError):
        recipient_rows(record)
