"""The checker of the fault-injection suite: reads what the system and its neighbours recorded and
lists every violation of the promises, Jepsen-style (a history checked by a program). Safety and
liveness both: a system that, after a fault, gave up on everything (marked every recipient
``unknown``, decided every slot ``skipped``) breaks the promises as surely as one that sent twice.

- every recipient of a campaign has exactly one terminal outcome, and an outcome other than
  ``sent`` only where the scenario explains it (``explained``); ``unknown`` only for a chunk that
  had a request on the wire at a stop, or its intent written just before one
  (``unknown_verdict``);
- no address got the campaign twice (the local SES server's own log of what it accepted);
- the Postgres ledger equals what Kafka recorded (the sinks and the trigger that explodes chunk
  outcomes into ledger rows lost or invented nothing);
- every nominal slot of a job has exactly one decision, judged from the ledger topic's whole
  history of the slot (the sink upserts on the record id, so Postgres shows only the last); a
  slot ran and succeeded unless the scenario explains otherwise; a slot recorded as run was
  called (the webhook receiver's log), one not run was not, and no fire id was called more often
  than its attempts unless the scenario allows the repeat (in flight at a fault).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from streams.ledger import recipient_rows
from streams.runtime.codec import codec
from streams.runtime.kafka_config import client_config
from streams.scheduling import schedule
from streams.scheduling.misfire import MISFIRE_THRESHOLD_MS
from streams.topology import LEDGER, RECIPIENT_OUTCOMES, TopicSpec

TERMINAL = {"sent", "suppressed", "expired_stale", "failed", "unknown", "cancelled"}
# the decisions that call the slot's target (streams.scheduling.misfire, the API's trigger and
# backfill); every other decision records the slot as not run
RUNS = frozenset({"fired", "missed_caught_up", "held_quiet_hours", "triggered", "backfilled"})
# the decisions a misfire policy makes for a slot reached more than MISFIRE_THRESHOLD_MS late
MISFIRES = frozenset({"missed_caught_up", "skipped_policy"})
# ``unknown_verdict``'s windows (why each is what it is: its docstring)
SLACK_MS = 3000
READ_LATE_MS = 1000
INTENT_BEFORE_STOP_MS = 30_000
# how long before a kill the intent of a chunk the killed worker had not yet sent may have been
# written: its produce and acknowledgement (p99 0.1 s in bench.fanout, seconds on a box at load
# 90), then the hand-over of the request, already built and signed, to its thread
# (``streams.adapters.ses.Departure``; ``cronstream_fanout_intent_open_seconds``). The member's
# lease answers the fence at once, so no coordinator round is in between
INTENT_BEFORE_KILL_MS = 5_000
# the chunks a stop may leave at ``intent`` with no request accepted: each worker holds at most
# SES_SLOTS chunks between their intent and SES's answer (``streams.campaigns.ses_slots``), and a
# kill's rebalance stops the survivors' walkers too: the most workers a scenario runs (join and
# leave)
WORKERS = 3
# how long before a fault a run may have been resolved and still be run again by the next owner:
# the workers commit their fired offsets every second (``broker_commit_interval``), and a done
# mark reaches the changelog a moment after the run's ledger record; a loaded box stretches both
UNCOMMITTED_MS = 3000


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


def _records(bootstrap: str, topic: str, key_prefix: str) -> Iterator[Message]:
    """Every record of ``topic`` whose key starts with ``key_prefix``, partition by partition in
    offset order (partitions interleaved), up to each partition's end when read."""
    consumer = Consumer({**client_config(bootstrap), "group.id": f"checker-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    parts = list(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    prefix, ended = key_prefix.encode(), set()
    try:
        while len(ended) < len(parts):
            for msg in consumer.consume(5000, 5.0):
                if msg.error():
                    ended.add(msg.partition())
                elif msg.key().startswith(prefix):
                    yield msg
    finally:
        consumer.close()


def history(bootstrap: str, topic: str, key_prefix: str,
            keep: Callable[[str], bool] | None = None) -> dict[str, list[tuple[int, Any]]]:
    """Every (timestamp ms, raw value) per key starting with ``key_prefix`` (and, with ``keep``,
    kept by it), in offset order, read from the topic itself (a changelog's or a ledger's)."""
    found: dict[str, list[tuple[int, Any]]] = {}
    for msg in _records(bootstrap, topic, key_prefix):
        key = msg.key().decode()
        if keep is None or keep(key):
            found.setdefault(key, []).append((msg.timestamp()[1], msg.value()))
    return found


def outcomes_trail(stack, campaign_id: str, emails: Collection[str]) -> list[str]:
    """Why Postgres and Kafka differ on ``emails`` (a few): each record of their chunks on the
    recipient-outcomes topic (where, when, what), the ledger row of the first address, and how
    far the sink's consumer group has committed on those partitions."""
    wanted, lines, parts = set(emails), [], set()
    decode = codec().decode
    for msg in _records(stack.s.bootstrap, RECIPIENT_OUTCOMES.name, f"{campaign_id}:"):
        record = decode(msg.value())
        if wanted & set(record["emails"]):
            parts.add(msg.partition())
            lines.append(f"{msg.key().decode()} p{msg.partition()}@{msg.offset()} "
                         f"ts={msg.timestamp()[1]} epoch={record['epoch']} "
                         f"completed_at={record['completed_at']} "
                         f"{dict(Counter(record['outcomes']))}")
    first = sorted(wanted)[0]
    with psycopg.connect(stack.s.pg_dsn) as conn:
        row = conn.execute("SELECT outcome, epoch, completed_at, reason FROM ledger "
                           "WHERE record_id = %s", (f"{campaign_id}:{first}",)).fetchone()
    lines.append(f"Postgres {first}: {row}")
    from streams.runtime.admin import committed_offsets, end_offsets
    from tests.integration.helpers import sink_of

    tps = [(RECIPIENT_OUTCOMES.name, p) for p in sorted(parts)]
    committed = committed_offsets(stack.s.bootstrap, f"connect-{sink_of(RECIPIENT_OUTCOMES)}")
    for (_, p), end in end_offsets(stack.s.bootstrap, tps).items():
        lines.append(f"sink committed p{p}@{committed.get((RECIPIENT_OUTCOMES.name, p))} of {end}")
    return lines


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


@dataclass
class Stops:
    """When a scenario's faults stopped walkers: ``kill`` (SIGKILL, SIGSTOP or a stopped broker:
    the moment after which a request the stopped process had written may still be read by the
    SES server) and ``others`` (a walker revoked or failed, alive afterwards). ``unknown_verdict``
    excuses an ``unknown`` chunk only around one of these."""

    kill: int | None = None
    others: list[int] = field(default_factory=list)

    def all(self) -> list[int]:
        return sorted(([self.kill] if self.kill is not None else []) + self.others)


def campaign_violations(stack, campaign_id: str, subject: str, emails: list[str],
                        explained: Collection[str] = (), stops: Stops | None = None,
                        calls: list[dict[str, Any]] | None = None) -> list[str]:
    """Everything wrong with one finished campaign; empty when the promises held.

    ``explained``: the outcomes besides ``sent`` that this scenario's fault causes (a deadline
    passing during an outage: ``expired_stale``); any other is a violation. ``unknown`` is judged
    chunk by chunk (``unknown_verdict``) against ``stops`` and the SES server's ``calls`` of the
    campaign (``GET /_local/calls``): with no stop, no ``unknown`` is explained."""
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
    unexplained = Counter(o for o in pg.values() if o not in {"sent", "unknown", *explained})
    if unexplained:
        problems.append(f"outcomes the fault does not explain: {dict(unexplained)}")
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
    chunks = kafka_ledger(stack.s.bootstrap, f"{campaign_id}:", RECIPIENT_OUTCOMES)
    kafka = {row["email"]: row["outcome"]  # an upload holds each address in one chunk
             for chunk in chunks.values() for row in recipient_rows(chunk).values()}
    if kafka != pg:
        diff = {e for e in set(kafka) | set(pg) if kafka.get(e) != pg.get(e)}
        problems.append(f"Postgres and Kafka ledgers differ on {len(diff)} addresses, e.g. "
                        f"{[(e, kafka.get(e), pg.get(e)) for e in sorted(diff)[:3]]} "
                        "(address, Kafka, Postgres); their records:\n  "
                        + "\n  ".join(outcomes_trail(stack, campaign_id, sorted(diff)[:3])))
    if unknown:
        problems += unknown_of_campaign(stack, campaign_id, chunks, stops or Stops(),
                                        calls).violations
    return problems


def unknown_of_campaign(stack, campaign_id: str, chunks: dict[str, dict[str, Any]],
                        stops: Stops, calls: list[dict[str, Any]] | None = None,
                        workers: int = WORKERS) -> UnknownVerdict:
    """``unknown_verdict`` of a campaign, from the send-chunks changelog and the SES server;
    ``workers``: how many the scenario ran (each may hold ``SES_SLOTS`` chunks at a stop)."""
    import httpx

    from streams.topology import APP_ID, SEND_CHUNKS_TABLE

    if calls is None:
        calls = httpx.get(f"{stack.s.ses_endpoint}/_local/calls",
                          params={"campaign": campaign_id}, timeout=60).json()
    states = history(stack.s.bootstrap, SEND_CHUNKS_TABLE.changelog(APP_ID), f"{campaign_id}:")
    from streams.campaigns.ses_slots import SES_SLOTS

    return unknown_verdict(chunks, states, calls, stops, per_stop=SES_SLOTS * workers)


# a walker stopping, as the worker logs it: revoked, fenced, or failed and walked again
WALKER_STOPS = ("revoked: walker stopped", "walker stopped, order left unacknowledged",
                "walking again from the chunk table")


def walker_stops(stack, campaign_id: str, since_ms: int, worker: str = "*") -> list[int]:
    """When the logs of the workers (``worker``: one, by its number) say a walker of the
    campaign stopped (a rebalance cancels a survivor's walkers too; a failed walk resolves its
    chunks caught mid-send ``unknown`` as a kill would) since ``since_ms``."""
    found = []
    for log in stack.s.home.joinpath("logs").glob(f"worker-{worker}.log"):
        for line in log.open(errors="replace"):
            if campaign_id in line and any(stop in line for stop in WALKER_STOPS):
                at = datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").astimezone(UTC)
                if (ms := int(at.timestamp() * 1000)) >= since_ms:
                    found.append(ms)
    return found


def out_at(calls_ms: Iterable[int], moment_ms: int) -> bool:
    """Whether one of a fire id's calls was out when a worker stopped, died or lost the slot's
    partition at ``moment_ms``: arrived at most ``UNCOMMITTED_MS`` before it (a run resolved
    then may be neither committed nor marked done where the next owner looks) and at most
    ``READ_LATE_MS`` after it (a request the worker had written, read late). Its next owner reads
    the fired record again and runs it: at-least-once webhooks, the fire id in a header."""
    return any(moment_ms - UNCOMMITTED_MS <= at <= moment_ms + READ_LATE_MS for at in calls_ms)


def every_second(start_ms: int, end_ms: int) -> list[int]:
    """The nominal slots of a ``* * * * * *`` job in [start, end]."""
    first = (start_ms + 999) // 1000 * 1000
    return list(range(first, end_ms + 1, 1000))


def ledger_history(bootstrap: str, fire_ids: Collection[str], key_prefix: str = ""
                   ) -> dict[str, list[dict[str, Any]]]:
    """Every ledger record of each slot of ``fire_ids``, oldest first: the whole history, where
    Postgres (the sink upserts on the record id) keeps only the newest."""
    wanted = set(fire_ids)
    decode = codec().decode
    return {key: [decode(value) for _, value in values]
            for key, values in history(bootstrap, LEDGER.name, key_prefix,
                                       keep=wanted.__contains__).items()}


def normal(decision: str, outcome: str) -> bool:
    """A slot that ran and succeeded: what every slot must end as unless the fault explains it."""
    return decision in RUNS and outcome == "succeeded"


def judge_slots(records: dict[str, list[dict[str, Any]]], pg: dict[str, tuple[str, str]],
                expected: Collection[str], calls: Iterable[str], *,
                explained: Collection[str] = (),
                may_repeat: Callable[[str], bool] = lambda fid: False) -> list[str]:
    """The slots' violations, from the ledger topic's history of each (``records``), Postgres's
    row of each (``pg``: fire id → (decision, outcome)) and the receiver's log (``calls``: the
    fire id of each webhook call, calls of other slots ignored).

    - each slot of ``expected`` has a decision, in Postgres and in Kafka, and the same one;
    - no slot has two different decisions in its history (a re-run writes the same decision again:
      at-least-once, allowed);
    - a misfire decision (``skipped_policy``, ``missed_caught_up``) only for a slot reached more
      than the misfire threshold late: a fault's stall made it late, or the policy is misapplied;
    - each slot ran and succeeded, unless its decision or outcome is one of ``explained`` (what the
      scenario's fault causes: ``skipped_policy`` and ``expired_stale`` after an outage, ...);
    - a slot recorded as run was called at least once, one recorded as not run never;
    - a slot ran once (one run record) and was called no more often than its attempts, unless
      ``may_repeat(fire id)``, the scenario's precise allowance (a run in flight at a kill, a
      zombie's): then its calls are its recorded runs' attempts, and at most one more (a run
      whose outcome was lost with the worker that made it)."""
    expected = set(expected)
    problems: list[str] = []
    missing = sorted(expected - set(pg))
    if missing:
        problems.append(f"{len(missing)} slots without a decision in Postgres, e.g. {missing[:3]}")
    not_in_kafka = sorted(expected - set(records))
    if not_in_kafka:
        problems.append(f"{len(not_in_kafka)} slots without a record on the ledger topic, e.g. "
                        f"{not_in_kafka[:3]}")
    last = {fid: (rs[-1]["decision"], rs[-1]["outcome"]) for fid, rs in records.items()
            if fid in expected}
    differ = sorted(f for f in last if f in pg and pg[f] != last[f])
    if differ:
        problems.append(f"Postgres and Kafka ledgers differ on {len(differ)} slots, e.g. "
                        f"{[(f, last[f], pg.get(f)) for f in differ[:3]]}")
    twice = sorted(f for f in last if len({r["decision"] for r in records[f]}) > 1)
    if twice:
        problems.append(f"{len(twice)} slots decided twice, e.g. "
                        f"{[(f, [r['decision'] for r in records[f]]) for f in twice[:3]]}")
    on_time = sorted(f for f in last if f in records and any(
        r["decision"] in MISFIRES and r["lateness_ms"] <= MISFIRE_THRESHOLD_MS for r in records[f]))
    if on_time:
        problems.append(f"{len(on_time)} slots decided as misfires though reached on time "
                        f"(within {MISFIRE_THRESHOLD_MS} ms), e.g. {on_time[:3]}")
    allowed = set(explained)
    odd = Counter(f"{d}/{o}" for d, o in last.values()
                  if not normal(d, o) and d not in allowed and o not in allowed)
    if odd:
        problems.append(f"slots decided or ended as the fault does not explain: {dict(odd)}")
    called = Counter(f for f in calls if f in expected)
    never = sorted(f for f, (d, o) in last.items() if d in RUNS and o == "succeeded"
                   and not called[f])
    if never:
        problems.append(f"{len(never)} slots recorded as run and succeeded that the receiver "
                        f"never saw, e.g. {never[:3]}")
    not_run = sorted(f for f, (d, _) in last.items() if d not in RUNS and called[f])
    if not_run:
        problems.append(f"{len(not_run)} slots recorded as not run that the receiver saw, e.g. "
                        f"{[(f, last[f][0]) for f in not_run[:3]]}")
    runs = {f: [r for r in records.get(f, []) if r["decision"] in RUNS] for f in called}
    unaccounted = sorted(f for f, n in called.items()
                         if n > max(1, sum(r["attempts"] for r in runs[f])) + 1)
    if unaccounted:
        problems.append(f"{len(unaccounted)} fire ids called more often than their recorded "
                        f"runs' attempts and one run lost at a fault, e.g. "
                        f"{[(f, called[f]) for f in unaccounted[:3]]}")
    repeats = sorted(f for f, n in called.items() if f not in unaccounted
                     and (n > max(1, sum(r["attempts"] for r in runs[f])) or len(runs[f]) > 1)
                     and not may_repeat(f))
    if repeats:
        problems.append(f"{len(repeats)} fire ids run again with no fault to explain it, e.g. "
                        f"{[(f, called[f], len(runs[f])) for f in repeats[:3]]}")
    return problems


def pg_slots(stack, fire_ids: Collection[str]) -> dict[str, tuple[str, str]]:
    """Postgres's (decision, outcome) of each of these slots."""
    with psycopg.connect(stack.s.pg_dsn) as conn:
        rows = conn.execute("SELECT fire_id, decision, outcome FROM ledger WHERE kind = 'job' "
                            "AND fire_id = ANY(%s)", (list(fire_ids),)).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def slots_violations(stack, expected: Collection[str], calls: Iterable[str], *,
                     explained: Collection[str] = (),
                     may_repeat: Callable[[str], bool] = lambda fid: False,
                     key_prefix: str = "") -> list[str]:
    """``judge_slots`` of these slots, read from the stack (the ledger topic read once)."""
    return judge_slots(ledger_history(stack.s.bootstrap, expected, key_prefix),
                       pg_slots(stack, expected), expected, calls, explained=explained,
                       may_repeat=may_repeat)


def slot_violations(stack, job_id: str, slots_ms: list[int], receiver_fires: list[str],
                    allowed_repeats: set[str] | None = None,
                    explained: Collection[str] = ()) -> list[str]:
    """``slots_violations`` of one job's nominal slots ``slots_ms``; a fire id called twice only
    if listed in ``allowed_repeats`` (in flight at a kill)."""
    repeats = allowed_repeats or set()
    return slots_violations(stack, {schedule.fire_id(job_id, s) for s in slots_ms},
                            receiver_fires, explained=explained,
                            may_repeat=repeats.__contains__, key_prefix=f"{job_id}@")


@dataclass
class UnknownVerdict:
    """``unknown`` chunks against the chunk table's history and the local SES server's calls."""

    unknown: set[str] = field(default_factory=set)  # chunks with an ``unknown`` recipient
    request_out: set[str] = field(default_factory=set)  # of those: a request left after the intent
    intent_only: set[str] = field(default_factory=set)  # of those: the intent, no request yet
    # of the unknown: no request after the intent was accepted (each held an SES slot at its stop)
    unaccepted: set[str] = field(default_factory=set)
    waiting: set[str] = field(default_factory=set)  # ``refused`` at the kill: waiting to retry
    # of the intent-only: how long before the stop nearest after it each one's intent was written,
    # and which stop it was
    intent_lead_ms: list[tuple[int, str]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)


def unknown_verdict(chunks: dict[str, dict[str, Any]], states: dict[str, list[tuple[int, Any]]],
                    calls: list[dict[str, Any]], stops: Stops,
                    slack_ms: int = SLACK_MS, read_late_ms: int = READ_LATE_MS,
                    intent_before_ms: int = INTENT_BEFORE_STOP_MS,
                    intent_before_kill_ms: int = INTENT_BEFORE_KILL_MS,
                    per_stop: int | None = None) -> UnknownVerdict:
    """Judge each chunk recorded ``unknown`` (``chunks``: chunk id → its RecipientOutcomes
    record) by its last ``intent`` in the send-chunks changelog (``states``) and the SES calls
    made for it after that (``calls``: ``GET /_local/calls`` of the campaign). ``unknown`` is
    explained only by a stop (``stops``: a kill or pause, and every revocation or failure of a
    walker), in one of two ways:

    - a request after the intent that SES accepted (the answer was lost), or that was out at a
      stop: answered no more than ``slack_ms`` before it, since the walker records a refusal
      only once the answer is in; and, for the kill, arrived no more than ``read_late_ms`` after
      it, since the server stamps a request when it reads it (in CI, requests the killed worker
      had written were read and answered 150-250 ms after the kill; a revoked walker is alive
      and stops calling);
    - no request after the intent: the walker stopped between its durable intent and its
      request. For the kill, the intent written at most ``intent_before_kill_ms`` before it (and
      not after): its request was built beside the intent and waited only for its
      acknowledgement and the member's lease. For a revoked walker, at most
      ``intent_before_ms`` before the revocation: a chunk whose lease ran out as its intent was
      acknowledged asks the coordinator, which waits for a settled group through the rebalance
      (the session timeout and the rebalance itself).

    Violations: a chunk recorded ``unknown`` with no intent at all (nothing may have left); one
    whose requests after its intent were all refused and answered well before each stop (it was
    waiting to retry with nothing sent, so its next owner had to send it); one with an intent and
    no request and no stop just after the intent; a chunk waiting to retry a refusal at the
    kill (``refused`` in the changelog then) with no intent since: its next owner had to send it;
    and more chunks with no request accepted after their intent than ``per_stop`` for each
    burst of stops (stops less than ``intent_before_ms`` apart are one burst: a kill and the
    rebalance it causes): each such chunk held one of its worker's SES slots at the stop, from
    before its intent until its answer or its refusal's acknowledgement, so more is ``unknown``
    wider than what was in flight. A chunk whose request was accepted may have given its slot
    back before its outcome was recorded: SES has its mail, and it is not counted."""
    by_chunk: dict[str, list[dict[str, Any]]] = {}
    for call in calls:
        by_chunk.setdefault(call["chunk"], []).append(call)
    verdict = UnknownVerdict()
    every = stops.all()
    kill = stops.kill
    if kill is not None:
        for chunk_id, changes in states.items():
            before = [value for at, value in changes if at <= kill]
            if before and before[-1] == b"refused":
                verdict.waiting.add(chunk_id)
    for chunk_id, record in chunks.items():
        if "unknown" not in record["outcomes"]:
            continue
        verdict.unknown.add(chunk_id)
        intents = [at for at, value in states.get(chunk_id, []) if value == b"intent"]
        if not intents:
            verdict.violations.append(f"chunk {chunk_id}: recorded unknown with no intent in "
                                      "the chunk table: nothing of it can have left")
            continue
        if chunk_id in verdict.waiting and kill is not None and intents[-1] <= kill:
            verdict.violations.append(
                f"chunk {chunk_id}: waiting to retry a refusal at the kill ({kill} ms) and "
                "recorded unknown without an intent since: its next owner had to send it")
            continue
        tag = "-".join(chunk_id.split(":")[1:3])  # streams.campaigns.ses_events.chunk_tag
        # the changelog's timestamps are the worker's, the calls' the SES server's: one clock
        after = [c for c in by_chunk.get(tag, []) if c["arrived_ms"] >= intents[-1]]
        if not any(c["outcome"] == "accepted" for c in after):
            verdict.unaccepted.add(chunk_id)
        if not after:
            verdict.intent_only.add(chunk_id)
            later = [stop for stop in every if stop >= intents[-1]]
            if later:
                stop = min(later)
                verdict.intent_lead_ms.append(
                    (stop - intents[-1], "kill" if stop == kill else "revocation"))
            # a revoked walker's intent may be acknowledged as its revocation is logged
            if not any(stop - (intent_before_kill_ms if stop == kill else intent_before_ms)
                       <= intents[-1] <= stop + (0 if stop == kill else slack_ms)
                       for stop in every):
                verdict.violations.append(
                    f"chunk {chunk_id}: recorded unknown with its intent at {intents[-1]} ms and "
                    f"no request after it, but neither the kill ({kill}) within "
                    f"{intent_before_kill_ms} ms after the intent nor a revocation {stops.others} "
                    f"within {intent_before_ms} ms: the walker held it back")
            continue
        verdict.request_out.add(chunk_id)
        if not any(c["outcome"] == "accepted" or any(
                c["arrived_ms"] <= stop + (read_late_ms if stop == kill else 0)
                and c["answered_ms"] >= stop - slack_ms
                for stop in every) for c in after):
            verdict.violations.append(
                f"chunk {chunk_id}: recorded unknown, but its {len(after)} requests after its "
                f"last intent were all refused, the last answered at "
                f"{max(c['answered_ms'] for c in after)} ms, more than {slack_ms} ms before any "
                f"stop {every}: it was waiting to retry, nothing had left")
    n = len(bursts(every, intent_before_ms))
    if per_stop is not None and len(verdict.unaccepted) > per_stop * n:
        verdict.violations.append(
            f"{len(verdict.unaccepted)} chunks recorded unknown with no request accepted after "
            f"their intent, more than {per_stop} for each of the {n} bursts of stops {every}: "
            "intents were written for chunks that were not about to leave or were not answered")
    return verdict


def bursts(stops: list[int], apart_ms: int) -> list[list[int]]:
    """The stops grouped: one less than ``apart_ms`` after the previous joins its burst."""
    groups: list[list[int]] = []
    for stop in sorted(stops):
        if groups and stop - groups[-1][-1] < apart_ms:
            groups[-1].append(stop)
        else:
            groups.append([stop])
    return groups
