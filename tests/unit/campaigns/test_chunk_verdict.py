"""A chunk is stopped by a cancel or an abort, or once its deadline has passed; otherwise it goes."""

from __future__ import annotations

from streams.campaigns.chunk_verdict import stop_reason

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
