"""Recipients recorded ``unknown`` are resolved to sent by SES's events of their messages,
whichever comes first, the event or the record; never after the window; never twice."""

from __future__ import annotations

from typing import Any

from streams.campaigns.unknown import Pending, on_event, on_record

WINDOW = 60_000


def chunk(*outcomes: str, at: int = 1_000) -> dict[str, Any]:
    emails = [f"r{i}@example.org" for i in range(len(outcomes))]
    return {"chunk_id": "c:u:0", "tenant": "t", "campaign_id": "c", "fire_id": "f",
            "nominal_time": 0, "epoch": 1, "completed_at": at, "emails": emails,
            "outcomes": list(outcomes), "reasons": [""] * len(emails),
            "message_ids": [""] * len(emails), "attempts": [1] * len(emails)}


def test_an_event_after_the_record_resolves_its_recipient_and_keeps_the_others_waiting() -> None:
    record, step = on_record(None, chunk("unknown", "unknown", "sent"))
    assert step.write == Pending(record), "a chunk with unknown recipients is kept"
    step = on_event(step.write, True, "r0@example.org", "m-0", "Send", 2_000, WINDOW)
    assert step.emit is not None and step.emit["outcomes"] == ["sent", "unknown", "sent"]
    assert step.emit["message_ids"][0] == "m-0" and "Send event" in step.emit["reasons"][0]
    assert step.write == Pending(step.emit), "r1 is still unknown: the chunk stays"
    again = on_event(step.write, True, "r0@example.org", "m-0", "Delivery", 3_000, WINDOW)
    assert again.emit is None and again.write is None and not again.delete, "resolved once"
    last = on_event(step.write, True, "r1@example.org", "m-1", "Delivery", 3_000, WINDOW)
    assert last.emit is not None and last.emit["outcomes"] == ["sent"] * 3 and last.delete


def test_events_before_the_record_are_applied_when_the_walker_records_the_chunk() -> None:
    step = on_event(None, False, "r1@example.org", "m-1", "Send", 2_000, WINDOW)
    assert step.write == Pending(None, {"r1@example.org": "m-1"}) and step.emit is None
    assert on_event(step.write, False, "r1@example.org", "m-1", "Delivery", 2_000,
                    WINDOW).write is None, "the same evidence again writes nothing"
    record, recorded = on_record(step.write, chunk("unknown", "unknown"))
    assert record["outcomes"] == ["unknown", "sent"] and record["message_ids"][1] == "m-1"
    assert recorded.write == Pending(record), "r0 still waits for its event"


def test_a_chunk_recorded_without_unknown_forgets_the_evidence_and_costs_no_write() -> None:
    record, step = on_record(None, chunk("sent", "suppressed"))
    assert record["outcomes"] == ["sent", "suppressed"] and step.write is None and not step.delete
    _, step = on_record(Pending(None, {"r0@example.org": "m-0"}), chunk("sent"))
    assert step.delete, "evidence of a chunk SES answered normally is dropped"
    assert on_event(None, True, "r0@example.org", "m-0", "Delivery", 5, WINDOW).write is None


def test_past_the_window_an_event_resolves_nothing_and_the_chunk_is_forgotten() -> None:
    record, step = on_record(None, chunk("unknown", at=1_000))
    late = on_event(step.write, True, "r0@example.org", "m-0", "Delivery", 1_000 + WINDOW + 1,
                    WINDOW)
    assert late.emit is None and late.delete, "after the window the recipient stays unknown"


def test_only_an_unknown_recipient_is_resolved_never_a_suppressed_or_failed_one() -> None:
    _, step = on_record(None, chunk("unknown", "failed"))
    other = on_event(step.write, True, "r1@example.org", "m-1", "Send", 2_000, WINDOW)
    assert other.emit is None and other.write is None and not other.delete


def test_the_table_value_round_trips() -> None:
    pending = Pending(chunk("unknown"), {"a@example.org": "m"})
    assert Pending.decode(pending.encode()) == pending and Pending.decode(None) is None
