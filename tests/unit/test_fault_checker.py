"""The fault suite's judge of ``unknown`` (``tests.chaos.checker.unknown_verdict``), on
hand-made histories: a judge that cannot fail would let the suite pass whatever the walker did."""

from __future__ import annotations

from typing import Any

from tests.chaos.checker import unknown_verdict

CHUNK = "camp:0a1b2c:7"
TAG = "0a1b2c-7"  # the local SES server's tag of each call (``feedback.chunk_tag``)
KILL = 100_000


def judged(call: dict[str, Any], stops: list[int] | None = None):
    chunks = {CHUNK: {"outcomes": ["unknown"]}}
    states = {CHUNK: [(90_000, b"intent")]}
    return unknown_verdict(chunks, states, [{"chunk": TAG, **call}], stops or [KILL])


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
                     stops=[KILL, KILL + 30_000])
    assert len(verdict.violations) == 1


def test_a_request_read_after_a_revocation_is_not_excused() -> None:
    """A revoked walker is alive: it stops calling, and what it had out was read before."""
    verdict = judged({"arrived_ms": 100_150, "answered_ms": 100_160, "outcome": "refused"},
                     stops=[KILL - 50_000, KILL])
    assert len(verdict.violations) == 1


def test_a_refusal_long_after_every_stop_is_a_violation() -> None:
    verdict = judged({"arrived_ms": 91_000, "answered_ms": 91_010, "outcome": "refused"},
                     stops=[KILL - 50_000])
    assert len(verdict.violations) == 1


def test_an_accepted_request_and_no_request_are_allowed() -> None:
    assert judged({"arrived_ms": 91_000, "answered_ms": 91_010,
                   "outcome": "accepted"}).violations == []
    verdict = unknown_verdict({CHUNK: {"outcomes": ["unknown"]}},
                              {CHUNK: [(90_000, b"intent")]}, [], [KILL])
    assert verdict.intent_only == {CHUNK} and verdict.violations == []
