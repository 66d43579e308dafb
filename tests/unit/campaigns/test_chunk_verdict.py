"""A chunk is stopped by a cancel or an abort, or once its deadline has passed; otherwise it goes.
Resumed from the chunk table, only a chunk whose request may have been accepted is unknown."""

from __future__ import annotations

from streams.campaigns.chunk_verdict import DONE, INTENT, RANK, REFUSED, Resume, resume, stop_reason
from streams.runtime.guarded_table import regresses

CAMPAIGN = {"status": "sending", "send_deadline_s": 60}


def test_a_sending_campaign_before_its_deadline_may_send() -> None:
    assert stop_reason(CAMPAIGN, deadline=1_000, now=1_000) is None


def test_past_the_deadline_the_chunk_expires_with_the_reason() -> None:
    outcome, reason = stop_reason(CAMPAIGN, deadline=1_000, now=1_001) or ("", "")
    assert outcome == "expired_stale" and "send_at + 60s" in reason


def test_a_cancel_wins_over_the_deadline() -> None:
    for status in ("cancelled", "aborted"):
        assert stop_reason({**CAMPAIGN, "status": status}, deadline=0, now=5) == (
            "cancelled", f"campaign {status}")


def test_a_refused_chunk_is_sent_by_whoever_resumes_it_and_only_an_intent_is_unknown() -> None:
    assert resume(None) is Resume.SEND
    assert resume(REFUSED) is Resume.SEND, "SES refused it: nothing left, so it must be sent"
    assert resume(INTENT) is Resume.UNKNOWN, "a request may have been accepted: never re-sent"
    assert resume(DONE) is Resume.SKIP


def test_intent_and_refused_alternate_while_a_chunk_retries_and_done_is_final() -> None:
    assert not regresses(RANK, INTENT, REFUSED) and not regresses(RANK, REFUSED, INTENT)
    assert regresses(RANK, DONE, REFUSED), "a zombie's late refusal must not undo a done chunk"
    assert regresses(RANK, DONE, INTENT)


def test_a_chunk_a_deposed_region_reserved_is_never_sent_unless_replicated_as_done() -> None:
    # docs/regions.md's table: inside the inherited reservation, no state and refused are
    # unknown too (the old region may have sent it since); done is skipped either way
    assert resume(None, inherited=True) is Resume.INHERITED
    assert resume(REFUSED, inherited=True) is Resume.INHERITED
    assert resume(INTENT, inherited=True) is Resume.UNKNOWN
    assert resume(DONE, inherited=True) is Resume.SKIP
    assert resume(None, inherited=False) is Resume.SEND
