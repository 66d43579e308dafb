"""What cronstream.recipients keeps (``streams.campaigns.retention``): every range a campaign may
still read, whatever its send_at; nothing once it is done or cancelled and no order of it is
pending; and the refusal a finite retention calls for."""

from __future__ import annotations

from typing import Any

from streams.campaigns.retention import (
    CLOCK_SKEW_MS,
    GRACE_MS,
    finished,
    keep_from,
    refusal,
    upload_began_ms,
)
from streams.topology import DAY_MS, FANOUT, RECIPIENTS

NOW = 1_800_000_000_000


def campaign(cid: str, status: str, ranges: dict[int, tuple[int, int]], *, send_at: int = NOW,
             deadline_s: int = 3600, updated: int = NOW) -> dict[str, Any]:
    return {"campaign_id": cid, "status": status, "send_at_ms": send_at,
            "send_deadline_s": deadline_s, "updated_ms": updated,
            "upload_ranges": [{"partition": p, "start": a, "end": b}
                              for p, (a, b) in ranges.items()]}


ENDS = {0: 1000, 1: 1000}


def test_a_campaign_scheduled_far_beyond_any_retention_keeps_its_recipients() -> None:
    far = campaign("far", "scheduled", {0: (100, 200), 1: (150, 250)}, send_at=NOW + 400 * DAY_MS)
    done = campaign("done", "scheduled", {0: (10, 100), 1: (20, 150)}, send_at=NOW - 3 * DAY_MS)
    # a year later (the clock of a pruner that runs every hour meanwhile): still kept
    assert keep_from([far, done], set(), ENDS, {}, NOW + 365 * DAY_MS) == {0: 100, 1: 150}


def test_done_cancelled_and_aborted_campaigns_go_after_the_grace() -> None:
    past = campaign("past", "scheduled", {0: (0, 10)}, send_at=NOW - 2 * DAY_MS)
    cancelled = campaign("c", "cancelled", {0: (10, 20)}, send_at=NOW + 9 * DAY_MS,
                         updated=NOW - GRACE_MS)
    just_cancelled = campaign("j", "cancelled", {1: (5, 20)}, send_at=NOW + 9 * DAY_MS,
                              updated=NOW - GRACE_MS + 1)
    assert keep_from([past, cancelled, just_cancelled], set(), ENDS, {}, NOW) == {0: 1000, 1: 5}
    assert finished(cancelled, NOW) and not finished(just_cancelled, NOW)


def test_a_ready_or_paused_campaign_is_kept_until_cancelled_or_past_its_deadline() -> None:
    ready = campaign("r", "ready", {0: (7, 9)}, send_at=NOW - 30 * DAY_MS, deadline_s=60)
    assert keep_from([ready], set(), ENDS, {}, NOW) == {0: 1000, 1: 1000}  # deadline + grace gone
    ready = campaign("r", "ready", {0: (7, 9)}, send_at=NOW + DAY_MS)
    paused = campaign("p", "paused", {1: (3, 9)}, send_at=NOW - DAY_MS, deadline_s=7 * 86400)
    assert keep_from([ready, paused], set(), ENDS, {}, NOW) == {0: 7, 1: 3}


def test_an_order_still_walked_holds_a_finished_campaigns_range() -> None:
    """A cancelled campaign's walker records the rest ``cancelled``; a campaign past its deadline
    after an outage records the rest ``expired_stale``: both read the range to do so."""
    old = campaign("old", "cancelled", {0: (40, 60), 1: (40, 60)}, updated=NOW - 30 * DAY_MS)
    assert keep_from([old], {("old", 1)}, ENDS, {}, NOW) == {0: 1000, 1: 40}


def test_an_upload_in_progress_holds_what_was_written_since_it_began() -> None:
    uploading = campaign("u", "uploading", {}, updated=NOW - 5_000)
    abandoned = campaign("a", "uploading", {}, updated=NOW - GRACE_MS - 1)
    assert upload_began_ms([uploading, abandoned], NOW) == NOW - 5_000 - CLOCK_SKEW_MS
    assert upload_began_ms([abandoned], NOW) is None
    assert keep_from([uploading], set(), ENDS, {0: 900, 1: 1000}, NOW) == {0: 900, 1: 1000}


def test_nothing_past_the_end_read_before_the_campaigns_is_deleted() -> None:
    assert keep_from([], set(), ENDS, {}, NOW) == ENDS


def test_a_finite_retention_refuses_what_it_would_delete_before_the_deadline() -> None:
    week = 7 * DAY_MS
    assert refusal(NOW + 30 * DAY_MS, 3600, NOW, -1) is None  # kept until pruned
    assert refusal(NOW + 5 * DAY_MS, 3600, NOW, week) is None
    reason = refusal(NOW + 8 * DAY_MS, 3600, NOW, week)
    assert reason is not None
    assert "retention.ms=604800000" in reason and RECIPIENTS.name in reason and "-1" in reason


def test_the_topics_a_campaign_needs_later_outlive_what_it_may_wait() -> None:
    """Recipients are kept until pruned; a fan-out order outlives the longest deadline the API
    accepts (7 days) by a week of outage."""
    assert RECIPIENTS.configs()["retention.ms"] == "-1"
    assert int(FANOUT.configs()["retention.ms"]) >= 14 * DAY_MS
