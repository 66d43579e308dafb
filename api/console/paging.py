"""The console's pure helpers: what a search matches, how a slot is coloured and said, where a
slot falls against a DST change. Kept apart from the pages so they are unit-tested without a
stack (tests/unit/api/console/test_paging.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from api.console import wording
from streams.scheduling import cron

PAGE = 25  # jobs or campaigns per list page
HISTORY_PAGE = 50  # slots per page of a job's timeline: one bounded read of the ledger
NEXT_SLOTS = 10

# decision -> the timeline's colour class; a fired slot is coloured by its outcome instead
DECISION_CLASS = {"skipped_paused": "paused", "skipped_overlap": "skipped",
                  "skipped_policy": "skipped", "missed_caught_up": "late",
                  "held_quiet_hours": "late",
                  "expired_stale": "expired"}
OUTCOME_CLASS = {"succeeded": "ok", "failed": "failed", "not_run": "skipped", "unknown": "pending",
                 "suppressed": "skipped"}


def slot_class(decision: str | None, outcome: str | None) -> str:
    """The colour of a slot on the timeline: why it did not run, or how its run ended."""
    if decision in DECISION_CLASS:
        return DECISION_CLASS[decision]
    return OUTCOME_CLASS.get(outcome or "", "pending")


def schedule_words(view: dict[str, Any], job_id: str | None = None) -> str:
    """A job's schedule in words, for the list and the job page (the public view's shape)."""
    s = view["schedule"]
    if "cron" in s:
        try:
            return wording.describe(s["cron"], job_id)
        except cron.CronSyntaxError:
            return s["cron"]
    if "every_s" in s:
        return f"every {s['every_s']} seconds"
    if "at" in s:
        return f"once, at {s['at']}"
    return "no schedule"


def matches(view: dict[str, Any], query: str) -> bool:
    """A free-text search over a job's id, name and labels (case-insensitive substring)."""
    q = query.casefold()
    fields = [view["id"], view.get("name") or ""]
    fields += [f"{k}:{v}" for k, v in (view.get("labels") or {}).items()]
    return any(q in f.casefold() for f in fields)


def is_label_filter(query: str) -> bool:
    """``key:value`` searches go to the API's label filter, which pages over any number of jobs."""
    key, sep, _ = query.partition(":")
    return bool(sep) and bool(key) and " " not in query


def with_dst_marks(slots_ms: list[int], zone: str) -> list[dict[str, Any]]:
    """The next slots with their local time, each marked where the zone's UTC offset differs from
    the previous slot's: a DST change falls between them (a gap or a repeat the job's
    ``dst`` policy decided)."""
    tz = ZoneInfo(zone)
    out: list[dict[str, Any]] = []
    previous = None
    for slot in slots_ms:
        local = datetime.fromtimestamp(slot / 1000, tz=UTC).astimezone(tz)
        offset = local.utcoffset()
        out.append({"utc": datetime.fromtimestamp(slot / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S"),
                    "local": local.strftime("%Y-%m-%d %H:%M:%S %Z"),
                    "dst_change": previous is not None and offset != previous})
        previous = offset
    return out
