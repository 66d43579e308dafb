"""Chunk outcomes on Kafka become one ledger row per recipient in Postgres: the second sink and
the trigger of connectors/ledger.sql, through the real broker, Connect and Postgres."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from stack import isolated
from stack.local import LEDGER_SQL
from streams.campaigns.chunk_outcomes import ChunkOutcomes
from streams.ledger import recipient_rows
from streams.topology import RECIPIENT_OUTCOMES
from tests.integration.helpers import sink_caught_up, sink_paused
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


def counts_in(conn: psycopg.Connection[Any], campaign_id: str = "c-up") -> dict[str, int]:
    """What ``campaign_counts`` holds for the campaign (kept by the triggers), per outcome."""
    found = conn.execute("SELECT outcome, sum(n) FROM campaign_counts WHERE campaign_id = %s "
                         "GROUP BY outcome HAVING sum(n) <> 0", (campaign_id,)).fetchall()
    return {outcome: int(n) for outcome, n in found}


def kept_counts(stack, campaign_id: str) -> dict[str, int]:
    with psycopg.connect(stack.s.pg_dsn) as conn:
        return counts_in(conn, campaign_id)


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


def test_a_chunk_recorded_twice_in_one_batch_of_the_sink_ends_as_its_newest_record(stack):
    """A sink replaying after a broker restart reads a chunk's 'sent' and the next owner's
    'unknown' in one batch; Postgres must end where the topic does, for every chunk (Debezium
    3.0.7's reduction buffer wrote such pairs in hash order: the older won half the time, so 24
    chunks all right by chance is one run in 16 million)."""
    campaign = {"campaign_id": f"batch-{uuid.uuid4().hex[:8]}", "tenant": "t-sink",
                "send_at_ms": 1_700_000_000_000}
    records = []
    for seq in range(24):
        chunk_id = f"{campaign['campaign_id']}:u1:{seq}"
        sent = ChunkOutcomes(chunk_id, campaign, "fire-1", 2)
        again = ChunkOutcomes(chunk_id, campaign, "fire-1", 2)
        for i in range(3):
            email = f"r{seq}-{i}@batch.example"
            sent.add(email, "sent", None, 1, f"msg-{seq}-{i}")
            again.add(email, "unknown", "at-most-once: not re-sent")
        records += [sent.record(1_700_000_004_000), again.record(1_700_000_009_000)]
    # paused, the sink reads nothing: on resuming, its first batch holds all 48 records
    with sink_paused(stack, RECIPIENT_OUTCOMES):
        assert isolated.call(f"{__name__}:produce", stack.s.bootstrap, records,
                             timeout_s=60) == 0
    wait_for(sink_caught_up(stack, RECIPIENT_OUTCOMES), timeout_s=120)
    found = rows(stack, campaign["campaign_id"])
    assert len(found) == 72
    wrong = sorted(k for k, row in found.items() if row["outcome"] != "unknown")
    assert wrong == [], f"{len(wrong)} recipients left at the chunk's older record"
    assert kept_counts(stack, campaign["campaign_id"]) == {"unknown": 72} \
        == recounted(stack, campaign["campaign_id"])


@pytest.fixture
def scratch(stack) -> Iterator[psycopg.Connection[Any]]:
    """A connection whose ``search_path`` is a schema of its own holding every table, function
    and trigger of connectors/ledger.sql: its triggers fired by plain SQL, beside the sinks'
    tables (which they never touch) and without Kafka."""
    schema = f"scratch_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(stack.s.pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"SET search_path TO {schema}")
        conn.execute(LEDGER_SQL.read_text())
        try:
            yield conn
        finally:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def record_chunk(conn: psycopg.Connection[Any], chunk_id: str, outcomes: dict[str, str]) -> None:
    """A chunk as the sink writes it: the trigger turns it into ledger rows and counts."""
    conn.execute(
        "INSERT INTO recipient_outcomes VALUES (%s, 't-up', 'c-up', 'f', now(), 1, now(), %s, %s, "
        "%s, %s, %s) ON CONFLICT (chunk_id) DO NOTHING",
        (chunk_id, list(outcomes), list(outcomes.values()), [""] * len(outcomes),
         [""] * len(outcomes), [1] * len(outcomes)))


def feedback(conn: psycopg.Connection[Any], email: str, event: str, bounce: str | None) -> None:
    """An SES event as the feedback sink writes it: upserted on (message id, email, type)."""
    conn.execute(
        "INSERT INTO ses_feedback (tenant, email, event_type, bounce_type, ses_message_id, "
        "event_ms, campaign_id, sns_message_id, sns_topic_arn, received_ms) VALUES ('t-up', %s, "
        "%s, %s, %s, 0, 'c-up', 'sns', 'arn', 0) ON CONFLICT (ses_message_id, email, event_type) "
        "DO UPDATE SET bounce_type = EXCLUDED.bounce_type", (email, event, bounce, f"m-{email}"))


def test_the_counts_of_a_ledger_from_before_them_are_counted_once(scratch) -> None:
    """A stack upgraded from before ``campaign_counts``: ``stack up`` applies ledger.sql, which
    creates the table and counts the rows the ledger and the feedback table already hold, as
    the triggers would have; applied again, it counts nothing twice."""
    record_chunk(scratch, "c-up:u:0", {"a@up.example": "sent", "b@up.example": "sent",
                                        "c@up.example": "failed"})
    feedback(scratch, "a@up.example", "Delivery", None)
    feedback(scratch, "b@up.example", "Bounce", "Permanent")
    kept = {"sent": 2, "failed": 1, "delivered": 1, "bounced": 1}
    assert counts_in(scratch) == kept
    scratch.execute("DROP TABLE campaign_counts")  # as before the upgrade
    scratch.execute(LEDGER_SQL.read_text())
    assert counts_in(scratch) == kept
    scratch.execute(LEDGER_SQL.read_text())
    assert counts_in(scratch) == kept


def test_an_event_upserted_again_moves_its_count_only_if_it_changed(scratch) -> None:
    feedback(scratch, "a@up.example", "Bounce", "Transient")  # a soft bounce: not counted
    assert counts_in(scratch) == {}
    feedback(scratch, "a@up.example", "Bounce", "Transient")  # SNS delivered it twice
    assert counts_in(scratch) == {}
    feedback(scratch, "a@up.example", "Bounce", "Permanent")  # the same event, now hard
    assert counts_in(scratch) == {"bounced": 1}
    feedback(scratch, "a@up.example", "Bounce", "Permanent")
    assert counts_in(scratch) == {"bounced": 1}


def test_a_chunk_recorded_again_moves_each_recipient_once(scratch) -> None:
    record_chunk(scratch, "c-up:u:1", {"a@up.example": "unknown", "b@up.example": "unknown"})
    record_chunk(scratch, "c-up:u:1", {"a@up.example": "sent", "b@up.example": "unknown",
                                        "c@up.example": "sent"})  # c: new in this record
    assert counts_in(scratch) == {"sent": 2, "unknown": 1}
