"""The fault suite's judges (``tests.chaos.checker``), on hand-made histories: a judge that cannot
fail would let the suite pass whatever the system did. Each rule is shown failing: ``unknown``
without a stop to explain it, a slot decided twice, a slot that gave up, a run nobody saw, a call
beyond the allowance."""

from __future__ import annotations

from typing import Any

from tests.chaos.checker import Stops, judge_slots, out_at, unknown_verdict

CHUNK = "camp:0a1b2c:7"
TAG = "0a1b2c-7"  # the local SES server's tag of each call (``feedback.chunk_tag``)
KILL = 100_000


def judged(call: dict[str, Any], stops: Stops | None = None):
    chunks = {CHUNK: {"outcomes": ["unknown"]}}
    states = {CHUNK: [(90_000, b"intent")]}
    return unknown_verdict(chunks, states, [{"chunk": TAG, **call}], stops or Stops(KILL))


def intent_only(intent_ms: int, stops: Stops, states: list[tuple[int, bytes]] | None = None):
    return unknown_verdict({CHUNK: {"outcomes": ["unknown"]}},
                           {CHUNK: states or [(intent_ms, b"intent")]}, [], stops)


def test_a_refusal_answered_long_before_the_kill_is_a_violation() -> None:
    verdict = judged({"arrived_ms": 91_000, "answered_ms": 91_010, "outcome": "refused"})
    assert verdict.unknown == {CHUNK} and len(verdict.violations) == 1


def test_a_request_out_at_the_kill_is_allowed() -> None:
    verdict = judged({"arrived_ms": 99_990, "answered_ms": 100_050, "outcome": "refused"})
    assert verdict.request_out == {CHUNK} and verdict.violations == []


def test_a_request_the_server_read_just_after_the_kill_is_allowed() -> None:
    """Written by the killed worker, read by the loaded server 150 ms later (seen in CI)."""
    verdict = judged({"arrived_ms": 100_150, "answered_ms": 100_160, "outcome": "refused"})
    assert verdict.violations == []


def test_a_request_read_well_after_the_kill_was_not_the_killed_workers() -> None:
    verdict = judged({"arrived_ms": 101_500, "answered_ms": 101_510, "outcome": "refused"},
                     stops=Stops(KILL, [KILL + 30_000]))
    assert len(verdict.violations) == 1


def test_a_request_read_after_a_revocation_is_not_excused() -> None:
    """A revoked walker is alive: it stops calling, and what it had out was read before."""
    verdict = judged({"arrived_ms": 100_150, "answered_ms": 100_160, "outcome": "refused"},
                     stops=Stops(KILL - 50_000, [KILL]))
    assert len(verdict.violations) == 1


def test_a_refusal_long_after_every_stop_is_a_violation() -> None:
    verdict = judged({"arrived_ms": 91_000, "answered_ms": 91_010, "outcome": "refused"},
                     stops=Stops(KILL - 50_000))
    assert len(verdict.violations) == 1


def test_an_accepted_request_is_allowed() -> None:
    assert judged({"arrived_ms": 91_000, "answered_ms": 91_010,
                   "outcome": "accepted"}).violations == []


def test_an_intent_and_no_request_is_allowed_only_just_before_a_stop() -> None:
    """The walker stopped between its durable intent and its request: the intent within
    ``INTENT_BEFORE_KILL_MS`` before the kill (the request was built beside it and waited only
    for its acknowledgement), or ``INTENT_BEFORE_STOP_MS`` before a revocation. Longer before,
    or after the kill, the walker had held the chunk back with nothing sent."""
    verdict = intent_only(KILL - 4_000, Stops(KILL))
    assert verdict.intent_only == {CHUNK} and verdict.violations == []
    assert verdict.intent_lead_ms == [(4_000, "kill")]
    assert len(intent_only(KILL - 6_000, Stops(KILL)).violations) == 1, \
        "seconds between the intent and the kill: wider than what was in flight"
    assert intent_only(KILL - 6_000, Stops(None, [KILL])).violations == [], \
        "a revoked walker's chunk waited for a settled group after its intent"
    assert len(intent_only(KILL - 31_000, Stops(None, [KILL])).violations) == 1
    assert len(intent_only(KILL + 10, Stops(KILL)).violations) == 1, "an intent after the kill"
    assert intent_only(KILL + 10, Stops(None, [KILL])).violations == [], \
        "a revoked walker's intent acknowledged as its revocation is logged"
    assert len(intent_only(90_000, Stops()).violations) == 1, "no stop: nothing explains it"


def test_unknown_with_no_intent_at_all_is_a_violation() -> None:
    verdict = unknown_verdict({CHUNK: {"outcomes": ["unknown", "sent"]}}, {}, [], Stops(KILL))
    assert verdict.unknown == {CHUNK} and len(verdict.violations) == 1
    assert "no intent" in verdict.violations[0]


def test_a_chunk_waiting_to_retry_at_the_kill_must_not_end_unknown() -> None:
    """Refused before the kill and never begun again: its next owner had to send it."""
    states = [(90_000, b"intent"), (95_000, b"refused")]
    verdict = intent_only(90_000, Stops(KILL), states)
    assert verdict.waiting == {CHUNK} and len(verdict.violations) == 1
    resent = states + [(KILL + 5_000, b"intent")]
    verdict = unknown_verdict({CHUNK: {"outcomes": ["unknown"]}}, {CHUNK: resent},
                              [{"chunk": TAG, "arrived_ms": KILL + 5_100,
                                "answered_ms": KILL + 5_200, "outcome": "accepted"}], Stops(KILL))
    assert verdict.waiting == {CHUNK} and verdict.violations == [], \
        "sent again by its next owner, whose accepted request's answer was lost"


def record(decision: str, outcome: str = "succeeded", attempts: int = 1,
           lateness_ms: int | None = None) -> dict[str, Any]:
    late = lateness_ms if lateness_ms is not None else 9_000 if decision in (
        "missed_caught_up", "skipped_policy") else 40
    return {"decision": decision, "outcome": outcome, "attempts": attempts, "lateness_ms": late}


def slots(records: dict[str, list[dict[str, Any]]], calls: list[str], **options: Any) -> list[str]:
    pg = {f: (rs[-1]["decision"], rs[-1]["outcome"]) for f, rs in records.items()}
    return judge_slots(records, pg, set(records), calls, **options)


def test_slots_run_once_each_pass() -> None:
    assert slots({"a": [record("fired")], "b": [record("missed_caught_up")]}, ["a", "b"]) == []


def test_a_slot_decided_twice_is_seen_in_its_history_not_only_its_last_row() -> None:
    problems = slots({"a": [record("expired_stale", "not_run"), record("fired")]}, ["a"])
    assert len(problems) == 1 and "decided twice" in problems[0]
    assert slots({"a": [record("fired"), record("fired")]}, ["a", "a"],
                 may_repeat=lambda f: True) == [], "a re-run writes the same decision: allowed"


def test_giving_up_is_a_violation_unless_the_fault_explains_it() -> None:
    gave_up = {"a": [record("skipped_policy", "not_run")], "b": [record("fired", "failed")],
               "c": [record("expired_stale", "not_run")]}
    problems = slots(gave_up, ["b"])
    assert len(problems) == 1 and "does not explain" in problems[0]
    assert slots(gave_up, ["b"], explained={"skipped_policy", "failed", "expired_stale"}) == []


def test_the_receiver_must_agree_with_the_ledger() -> None:
    problems = slots({"a": [record("fired")]}, [])
    assert len(problems) == 1 and "never saw" in problems[0]
    problems = slots({"a": [record("skipped_policy", "not_run")]}, ["a"],
                     explained={"skipped_policy"})
    assert len(problems) == 1 and "not run that the receiver saw" in problems[0]


def test_a_call_beyond_the_attempts_needs_the_scenarios_allowance() -> None:
    problems = slots({"a": [record("fired")]}, ["a", "a"])
    assert len(problems) == 1 and "no fault to explain" in problems[0]
    assert slots({"a": [record("fired")]}, ["a", "a"], may_repeat={"a"}.__contains__) == [], \
        "a run lost with the worker that made it, then run again"
    assert slots({"a": [record("fired", attempts=3)]}, ["a"] * 3) == [], "retries are calls"
    two_runs = {"a": [record("fired", attempts=2), record("fired")]}
    assert len(slots(two_runs, ["a"] * 3)) == 1, "a second run needs the allowance"
    assert slots(two_runs, ["a"] * 3, may_repeat=lambda f: True) == []
    problems = slots({"a": [record("fired")]}, ["a"] * 3, may_repeat=lambda f: True)
    assert len(problems) == 1 and "one run lost" in problems[0], "two calls no run accounts for"


def test_a_call_out_at_a_fault_is_one_that_came_just_before_it_or_just_after() -> None:
    assert out_at([97_500], 100_000) and out_at([100_900], 100_000)
    assert not out_at([96_000, 101_500], 100_000)


def test_a_slot_missing_or_differing_between_postgres_and_kafka() -> None:
    records = {"a": [record("fired")]}
    assert len(judge_slots(records, {}, {"a"}, ["a"])) == 1
    assert len(judge_slots({}, {"a": ("fired", "succeeded")}, {"a"}, ["a"])) == 1
    problems = judge_slots(records, {"a": ("fired", "failed")}, {"a"}, ["a"])
    assert len(problems) == 1 and "differ" in problems[0]


def test_a_misfire_decision_for_a_slot_reached_on_time_is_a_violation() -> None:
    """``skipped_policy`` or ``missed_caught_up`` only past the misfire threshold: a slot reached
    on time and skipped gave up without a fault to explain it."""
    problems = slots({"a": [record("skipped_policy", "not_run", lateness_ms=1_200)]}, [],
                     explained={"skipped_policy"})
    assert len(problems) == 1 and "reached on time" in problems[0]
    assert len(slots({"a": [record("missed_caught_up", lateness_ms=5_000)]}, ["a"])) == 1
    assert slots({"a": [record("missed_caught_up", lateness_ms=5_001)]}, ["a"]) == []


def test_more_unanswered_intents_than_the_send_slots_is_a_violation() -> None:
    """A worker holds at most ``per_stop`` chunks between intent and answer: more chunks left at
    ``intent`` with no request accepted by one burst of stops were intents written for chunks
    still waiting (issue 42: ``unknown`` as wide as the chunks in flight, not the requests).
    A chunk SES accepted is not counted: it may have given its slot back before its outcome."""
    chunks = {f"camp:0a1b2c:{n}": {"outcomes": ["unknown"]} for n in range(5)}
    states = {chunk: [(KILL - 500, b"intent")] for chunk in chunks}
    within = unknown_verdict(chunks, states, [], Stops(KILL, [KILL + 2_000]), per_stop=5)
    assert len(within.intent_only) == 5 and within.violations == []
    over = unknown_verdict(chunks, states, [], Stops(KILL, [KILL + 2_000]), per_stop=4)
    assert len(over.violations) == 1 and "more than 4" in over.violations[0]
    assert len(over.unaccepted) == 5
    apart = unknown_verdict(chunks, states, [], Stops(KILL - 400, [KILL + 40_000]), per_stop=3)
    assert apart.violations == [], "two bursts of stops: twice the slots"


def test_a_chunk_ses_accepted_is_not_counted_against_the_slots() -> None:
    chunks = {f"camp:0a1b2c:{n}": {"outcomes": ["unknown"]} for n in range(3)}
    states = {chunk: [(KILL - 500, b"intent")] for chunk in chunks}
    calls = [{"chunk": f"0a1b2c-{n}", "arrived_ms": KILL - 400, "answered_ms": KILL - 300,
              "outcome": "accepted" if n else "throttled"} for n in range(3)]
    verdict = unknown_verdict(chunks, states, calls, Stops(KILL), per_stop=1)
    assert verdict.unaccepted == {"camp:0a1b2c:0"} and verdict.violations == []
