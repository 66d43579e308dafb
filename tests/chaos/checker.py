"""The checker of the fault-injection suite: reads what the system and its neighbours recorded and
lists every violation of the two promises, Jepsen-style (a history checked by a program).

- every recipient of a campaign has exactly one terminal outcome;
- no address got the campaign twice (the local SES server's own log of what it accepted);
- the Postgres ledger equals what Kafka recorded (the sinks and the trigger that explodes chunk
  outcomes into ledger rows lost or invented nothing);
- every nominal slot of a job in a window has exactly one decision, and the webhook receiver saw
  no fire id more often than the at-least-once contract allows;
- ``unknown`` is no wider than a request in flight: a chunk that SES had refused and that was
  waiting to retry when its walker stopped is sent by the next owner, not recorded ``unknown``.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from streams.runtime.codec import codec
from streams.runtime.kafka_config import client_config
from streams.scheduling import schedule
from streams.scheduling.ledger import recipient_rows
from streams.topology import LEDGER, RECIPIENT_OUTCOMES, TopicSpec

TERMINAL = {"sent", "suppressed", "expired_stale", "failed", "unknown", "cancelled"}


@dataclass
class Tally:
    """What a run of the suite checked: the figures docs/testing.md quotes for the last soak run."""

    scenarios: int = 0
    seconds: float = 0.0
    events: int = 0  # recipients and slots whose history the checker judged
    faults: int = 0  # faults injected (a kill, a pause, a restart, an outage, a storm)
    violations: int = 0
    figures: list[str] = field(default_factory=list)  # what a scenario measured, for the record


TALLY = Tally()


def history(bootstrap: str, topic: str, key_prefix: str) -> dict[str, list[tuple[int, Any]]]:
    """Every (timestamp ms, raw value) per key starting with ``key_prefix``, in offset order,
    read from the topic itself (a changelog's or a ledger's)."""
    consumer = Consumer({**client_config(bootstrap), "group.id": f"checker-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    parts = list(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    prefix, found, ended = key_prefix.encode(), {}, set()
    try:
        while len(ended) < len(parts):
            for msg in consumer.consume(5000, 5.0):
                if msg.error():
                    ended.add(msg.partition())
                elif msg.key().startswith(prefix):
                    found.setdefault(msg.key().decode(), []).append(
                        (msg.timestamp()[1], msg.value()))
    finally:
        consumer.close()
    return found


def kafka_ledger(bootstrap: str, key_prefix: str, topic: TopicSpec = LEDGER
                 ) -> dict[str, dict[str, Any]]:
    """Newest value per key starting with ``key_prefix``, read from the topic itself."""
    return {key: codec().decode(values[-1][1])
            for key, values in history(bootstrap, topic.name, key_prefix).items()}


def pg_campaign(stack, campaign_id: str) -> dict[str, str]:
    """Each recipient's outcome in Postgres ({} until the sink has created the table: the suite
    runs first on a fresh machine)."""
    from tests.integration.test_campaigns import outcomes

    return outcomes(stack, campaign_id)


def ses_sends(stack, subject: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    if stack.ses_log.exists():
        with stack.ses_log.open() as log:
            for line in log:
                mail = json.loads(line)
                if mail["subject"] == subject:
                    counts[mail["to"]] += 1
    return counts


def campaign_violations(stack, campaign_id: str, subject: str, emails: list[str]) -> list[str]:
    """Everything wrong with one finished campaign; empty when both promises held."""
    problems: list[str] = []
    pg = pg_campaign(stack, campaign_id)
    for email in emails:
        outcome = pg.get(email)
        if outcome is None:
            problems.append(f"{email}: no outcome")
        elif outcome not in TERMINAL:
            problems.append(f"{email}: outcome {outcome!r} is not terminal")
    extra = set(pg) - set(emails)
    if extra:
        problems.append(f"{len(extra)} outcomes for addresses not uploaded, e.g. {sorted(extra)[:3]}")
    sends = ses_sends(stack, subject)
    twice = {a: n for a, n in sends.items() if n > 1}
    if twice:
        problems.append(f"{len(twice)} addresses mailed more than once, e.g. {list(twice.items())[:3]}")
    sent = {e for e, o in pg.items() if o == "sent"}
    unknown = {e for e, o in pg.items() if o == "unknown"}
    if not sent <= set(sends):
        problems.append(f"{len(sent - set(sends))} recorded sent but never reached SES")
    if not set(sends) <= sent | unknown:
        problems.append(f"{len(set(sends) - sent - unknown)} reached SES but are recorded as "
                        "neither sent nor unknown")
    kafka = {row["email"]: row["outcome"]  # an upload holds each address in one chunk
             for chunk in kafka_ledger(stack.s.bootstrap, f"{campaign_id}:",
                                       RECIPIENT_OUTCOMES).values()
             for row in recipient_rows(chunk).values()}
    if kafka != pg:
        diff = {e for e in set(kafka) | set(pg) if kafka.get(e) != pg.get(e)}
        problems.append(f"Postgres and Kafka ledgers differ on {len(diff)} addresses, e.g. "
                        f"{[(e, kafka.get(e), pg.get(e)) for e in sorted(diff)[:3]]}")
    return problems


def every_second(start_ms: int, end_ms: int) -> list[int]:
    """The nominal slots of a ``* * * * * *`` job in [start, end]."""
    first = (start_ms + 999) // 1000 * 1000
    return list(range(first, end_ms + 1, 1000))


def slot_violations(stack, job_id: str, slots_ms: list[int], receiver_fires: list[str],
                    allowed_repeats: set[str] | None = None) -> list[str]:
    """Every nominal slot decided exactly once, the same in Postgres and Kafka; a fire id
    delivered twice only if listed in ``allowed_repeats`` (in flight at a kill)."""
    problems = []
    expected = {schedule.fire_id(job_id, s) for s in slots_ms}
    with psycopg.connect(stack.s.pg_dsn) as conn:
        rows = conn.execute("SELECT fire_id, decision, outcome FROM ledger WHERE kind = 'job' AND "
                            "job_id = %s", (job_id,)).fetchall()
    pg = {r[0]: (r[1], r[2]) for r in rows}
    missing = sorted(expected - set(pg))
    if missing:
        problems.append(f"{len(missing)} slots without a decision, e.g. {missing[:3]}")
    kafka = {k: (v["decision"], v["outcome"])
             for k, v in kafka_ledger(stack.s.bootstrap, f"{job_id}@").items()}
    if {k: pg.get(k) for k in kafka} != kafka:
        problems.append("Postgres and Kafka ledgers differ for the job's slots")
    repeats = {f for f, n in Counter(receiver_fires).items() if n > 1} - (allowed_repeats or set())
    if repeats:
        problems.append(f"{len(repeats)} fire ids delivered twice, e.g. {sorted(repeats)[:3]}")
    return problems


@dataclass
class UnknownVerdict:
    """``unknown`` chunks against the chunk table's history and the local SES server's calls."""

    unknown: set[str] = field(default_factory=set)  # chunks with an ``unknown`` recipient
    request_out: set[str] = field(default_factory=set)  # of those: a request left after the intent
    intent_only: set[str] = field(default_factory=set)  # of those: the intent, no request yet
    waiting: set[str] = field(default_factory=set)  # ``refused`` at the kill: waiting to retry
    violations: list[str] = field(default_factory=list)


def unknown_verdict(chunks: dict[str, dict[str, Any]], states: dict[str, list[tuple[int, Any]]],
                    calls: list[dict[str, Any]], stops_ms: list[int],
                    slack_ms: int = 3000, read_late_ms: int = 1000) -> UnknownVerdict:
    """Judge each chunk recorded ``unknown`` (``chunks``: chunk id → its RecipientOutcomes
    record) by its last ``intent`` in the send-chunks changelog (``states``) and the SES calls
    made for it after that (``calls``: ``GET /_local/calls`` of the campaign). Allowed: no
    request after the intent (the walker stopped between its durable intent and the call), or
    one that SES accepted, or one that was out at a stop (``stops_ms``: the kill and every
    revocation of a walker; answered no more than ``slack_ms`` before it, since the walker
    records a refusal only once the answer is in; and, for the kill (the first stop), arrived
    no more than ``read_late_ms`` after it, since the server stamps a request when it reads it:
    in CI, requests the killed worker had written were read and answered 150-250 ms after the
    kill; a revoked walker is alive and stops calling). A violation: every request
    after the intent was refused and answered well before each stop. That chunk was waiting to
    retry with nothing sent, so its next owner had to send it."""
    by_chunk: dict[str, list[dict[str, Any]]] = {}
    for call in calls:
        by_chunk.setdefault(call["chunk"], []).append(call)
    verdict = UnknownVerdict()
    kill = min(stops_ms)
    for chunk_id, changes in states.items():
        before = [value for at, value in changes if at <= kill]
        if before and before[-1] == b"refused":
            verdict.waiting.add(chunk_id)
    for chunk_id, record in chunks.items():
        if "unknown" not in record["outcomes"]:
            continue
        verdict.unknown.add(chunk_id)
        intents = [at for at, value in states.get(chunk_id, []) if value == b"intent"]
        tag = "-".join(chunk_id.split(":")[1:3])  # streams.campaigns.feedback.chunk_tag
        # the changelog's timestamps are the worker's, the calls' the SES server's: one clock
        after = [c for c in by_chunk.get(tag, []) if not intents or c["arrived_ms"] >= intents[-1]]
        if not after:
            verdict.intent_only.add(chunk_id)
            continue
        verdict.request_out.add(chunk_id)
        if not any(c["outcome"] == "accepted" or any(
                c["arrived_ms"] <= stop + (read_late_ms if stop == kill else 0)
                and c["answered_ms"] >= stop - slack_ms
                for stop in stops_ms) for c in after):
            verdict.violations.append(
                f"chunk {chunk_id}: recorded unknown, but its {len(after)} requests after its "
                f"last intent were all refused, the last answered at "
                f"{max(c['answered_ms'] for c in after)} ms, more than {slack_ms} ms before any "
                f"stop {stops_ms}: it was waiting to retry, nothing had left")
    return verdict
