"""Chunk outcomes on Kafka become one ledger row per recipient in Postgres: the second sink and
the trigger of connectors/ledger.sql, through the real broker, Connect and Postgres."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from stack import isolated
from stack.local import apply_ledger_sql
from streams.scheduling.ledger import ChunkOutcomes, recipient_rows
from tests.waiting import wait_for


def produce(bootstrap: str, records: list[dict[str, Any]]) -> int:
    """Runs in a child process (``stack.isolated``): the test run keeps no Kafka client."""
    from streams.runtime.codec import codec
    from streams.runtime.emit import Emitter
    from streams.topology import RECIPIENT_OUTCOMES

    emitter = Emitter(bootstrap, "test-recipient-outcomes")
    for record in records:
        emitter.produce(RECIPIENT_OUTCOMES, record["chunk_id"],
                        codec().encode("RecipientOutcomes", record), 0)
    return emitter.flush()


def rows(stack, campaign_id: str) -> dict[str, dict[str, Any]]:
    with psycopg.connect(stack.s.pg_dsn) as conn:
        found = conn.execute(
            "SELECT record_id, email, outcome, reason, message_id, attempts, fire_id, epoch, "
            "kind, job_id, decision, lateness_ms FROM ledger WHERE campaign_id = %s",
            (campaign_id,)).fetchall()
    return {r[0]: {"email": r[1], "outcome": r[2], "reason": r[3], "message_id": r[4],
                   "attempts": r[5], "fire_id": r[6], "epoch": r[7],
                   "extra": (r[8], r[9], r[10], r[11])} for r in found}


def kept_counts(stack, campaign_id: str) -> dict[str, int]:
    """What ``campaign_counts`` holds for the campaign (kept by the triggers), per outcome."""
    with psycopg.connect(stack.s.pg_dsn) as conn:
        found = conn.execute("SELECT outcome, sum(n) FROM campaign_counts WHERE campaign_id = %s "
                             "GROUP BY outcome HAVING sum(n) <> 0", (campaign_id,)).fetchall()
    return {outcome: int(n) for outcome, n in found}


def recounted(stack, campaign_id: str) -> dict[str, int]:
    with psycopg.connect(stack.s.pg_dsn) as conn:
        found = conn.execute("SELECT outcome, count(*) FROM ledger WHERE kind = 'campaign' AND "
                             "campaign_id = %s GROUP BY outcome", (campaign_id,)).fetchall()
    return dict(found)


def test_a_chunk_record_becomes_its_recipients_ledger_rows_and_the_newest_wins(stack):
    campaign = {"campaign_id": f"sink-{uuid.uuid4().hex[:8]}", "tenant": "t-sink",
                "send_at_ms": 1_700_000_000_000}
    first = ChunkOutcomes(f"{campaign['campaign_id']}:u1:0", campaign, "fire-1", 2)
    first.add("a@sink.example", "sent", None, 1, "msg-a")
    first.add("b@sink.example", "suppressed", "address is suppressed")
    # an SES error is free text: what an array literal would need escaped must arrive intact
    first.add("c@sink.example", "failed", 'MessageRejected: "a, {b}" \\ NULL ü', 3)
    other = ChunkOutcomes(f"{campaign['campaign_id']}:u1:1", campaign, "fire-1", 2)
    other.add("d@sink.example", "sent", None, 1, "msg-d")
    other.add("d@sink.example", "unknown", "twice in one chunk: the last outcome wins")
    records = [first.record(1_700_000_004_000), other.record(1_700_000_004_500)]
    assert isolated.call(f"{__name__}:produce", stack.s.bootstrap, records, timeout_s=60) == 0

    expected = recipient_rows(records[0]) | recipient_rows(records[1])
    found = wait_for(lambda: (r := rows(stack, campaign["campaign_id"])) and len(r) == 4 and r,
                     timeout_s=60)
    assert {k: {f: v for f, v in row.items() if f != "extra"} for k, row in found.items()} \
        == expected
    assert found[f"{campaign['campaign_id']}:a@sink.example"]["extra"] == (
        "campaign", f"campaign-{campaign['campaign_id']}", "campaign_send", 4000)
    # the counts a campaign's page reads are kept as the rows are written
    assert kept_counts(stack, campaign["campaign_id"]) == {"sent": 1, "suppressed": 1,
                                                           "failed": 1, "unknown": 1}
    # in the bucket of the second they were written, not of their completed_at (2023 here): the
    # rate a campaign's page shows is how fast outcomes reach the ledger, which lags the send
    with psycopg.connect(stack.s.pg_dsn) as conn:
        written_lately = conn.execute(
            "SELECT sum(n) FROM campaign_counts WHERE campaign_id = %s AND at_second > "
            "EXTRACT(EPOCH FROM now()) - 300", (campaign["campaign_id"],)).fetchone()
    assert written_lately == (4,)

    # the same chunk recorded again (found at intent after a crash): its rows take the new outcome
    again = ChunkOutcomes(first.chunk_id, campaign, "fire-1", 3)
    again.add_all(first.emails, "unknown", "at-most-once: not re-sent")
    assert isolated.call(f"{__name__}:produce", stack.s.bootstrap,
                         [again.record(1_700_000_009_000)], timeout_s=60) == 0
    wait_for(lambda: {r["outcome"] for k, r in rows(stack, campaign["campaign_id"]).items()
                      if k != f"{campaign['campaign_id']}:d@sink.example"} == {"unknown"},
             timeout_s=60)
    with psycopg.connect(stack.s.pg_dsn) as conn:
        staged = conn.execute("SELECT count(*) FROM recipient_outcomes WHERE campaign_id = %s",
                              (campaign["campaign_id"],)).fetchone()
    assert staged == (0,)  # a staging table: the ledger is the record
    # the recipients recorded again moved from their old outcomes' counts to the new one
    assert kept_counts(stack, campaign["campaign_id"]) == {"unknown": 4} \
        == recounted(stack, campaign["campaign_id"])


def test_the_counts_of_a_ledger_from_before_them_are_counted_once(stack):
    """A stack upgraded from before ``campaign_counts``: ``stack up`` applies ledger.sql, which
    creates the table and counts the campaign rows already in the ledger."""
    campaign = {"campaign_id": f"sink-{uuid.uuid4().hex[:8]}", "tenant": "t-sink",
                "send_at_ms": 1_700_000_000_000}
    chunk = ChunkOutcomes(f"{campaign['campaign_id']}:u1:0", campaign, "fire-1", 1)
    chunk.add_all([f"r{i}@sink.example" for i in range(5)], "sent", None)
    assert isolated.call(f"{__name__}:produce", stack.s.bootstrap,
                         [chunk.record(1_700_000_004_000)], timeout_s=60) == 0
    wait_for(lambda: len(rows(stack, campaign["campaign_id"])) == 5, timeout_s=60)
    with psycopg.connect(stack.s.pg_dsn) as conn:
        conn.execute("DROP TABLE campaign_counts")
    apply_ledger_sql(pg_host="127.0.0.1", pg_port=stack.s.pg_port)
    assert kept_counts(stack, campaign["campaign_id"]) == {"sent": 5} \
        == recounted(stack, campaign["campaign_id"])
    apply_ledger_sql(pg_host="127.0.0.1", pg_port=stack.s.pg_port)  # idempotent: not twice
    assert kept_counts(stack, campaign["campaign_id"]) == {"sent": 5}
