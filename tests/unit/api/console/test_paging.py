"""The console's pure helpers: slot colours, search, schedule words, DST marks."""

from datetime import UTC, datetime

from fastapi import HTTPException

from api.console import paging
from api.console.web import problem_text
from api.errors import problem


def test_a_slot_is_coloured_by_why_it_did_not_run_else_by_its_outcome():
    assert paging.slot_class("skipped_paused", "not_run") == "paused"
    assert paging.slot_class("skipped_overlap", None) == "skipped"
    assert paging.slot_class("expired_stale", "not_run") == "expired"
    assert paging.slot_class("fired", "succeeded") == "ok"
    assert paging.slot_class("fired", "failed") == "failed"
    assert paging.slot_class("fired", "suppressed") == "skipped", "a reminder not sent, no fault"
    assert paging.slot_class("fired", None) == "pending"


def test_search_matches_id_name_and_labels_case_insensitively():
    view = {"id": "nightly-report", "name": "Nightly Report", "labels": {"team": "billing"}}
    assert paging.matches(view, "NIGHTLY")
    assert paging.matches(view, "report")
    assert paging.matches(view, "team:bill")
    assert not paging.matches(view, "weekly")
    assert paging.is_label_filter("team:billing")
    assert not paging.is_label_filter("nightly") and not paging.is_label_filter(":x")


def test_schedule_words():
    assert paging.schedule_words({"schedule": {"cron": "*/5 * * * *"}}) == "every 5 minutes"
    assert paging.schedule_words({"schedule": {"every_s": 30}}) == "every 30 seconds"
    assert paging.schedule_words({"schedule": {"at": "2030-01-01T00:00:00Z"}}).startswith("once")


def test_a_dst_change_between_slots_is_marked():
    def ms(*args: int) -> int:
        return int(datetime(*args, tzinfo=UTC).timestamp() * 1000)

    # Europe/Berlin springs forward on 2026-03-29 at 01:00 UTC
    slots = [ms(2026, 3, 28, 8), ms(2026, 3, 29, 7), ms(2026, 3, 30, 7)]
    marked = paging.with_dst_marks(slots, "Europe/Berlin")
    assert [m["dst_change"] for m in marked] == [False, True, False]
    assert marked[1]["local"].endswith("CEST")


def test_an_api_error_reads_as_one_line():
    assert problem_text(problem(422, "schedule.cron", "bad minute")) == "schedule.cron: bad minute"
    assert problem_text(problem(404, "", "job x not found")) == "job x not found"
    assert problem_text(HTTPException(403, detail="plain")) == "plain"
