"""What an SES event does to its address (``streams.campaigns.bounces``) and the feedback agent's
writes (``streams.campaigns.apply_feedback.apply``), without a broker: which events suppress,
soft bounces counted in their window in any order, and a redelivered event changing nothing."""

from __future__ import annotations

import asyncio
import io
import itertools
import json
from typing import Any

import fastavro
import pytest

from streams.campaigns import apply_feedback, bounces
from streams.runtime.codec import SCHEMAS_DIR, Codec, codec
from streams.topology import SUPPRESSIONS, partition_for

DAY = bounces.DAY_MS
POLICY = bounces.Policy(soft_limit=3, window_ms=7 * DAY)
T0 = 1_800_000_000_000


def event(kind: str, message: str = "m1", at: int = T0, **fields: Any) -> dict[str, Any]:
    return {"tenant": "acme", "email": "a@example.org", "event_type": kind,
            "bounce_type": None, "complaint_type": None, "ses_message_id": message,
            "feedback_id": f"fb-{message}", "event_ms": at, "received_ms": at + 5, **fields}


def run(state: bounces.AddressState, *records: dict[str, Any]
        ) -> tuple[bounces.AddressState, list[bounces.Decision]]:
    decisions = []
    for record in records:
        decision = bounces.decide(state, record, POLICY)
        decisions.append(decision)
        if decision.state is not None:  # as the table keeps it: through its bytes
            state = bounces.AddressState.decode(decision.state.encode())
    return state, decisions


@pytest.mark.parametrize(("record", "reason"), [
    (event("Bounce", bounce_type="Permanent", bounce_subtype="General"), "bounce"),
    (event("Bounce", bounce_type="Permanent", bounce_subtype="Suppressed"), "bounce"),
    (event("Complaint"), "complaint"),
    (event("Complaint", complaint_type="abuse"), "complaint"),
])
def test_a_hard_bounce_or_a_complaint_suppresses_with_its_reason_and_feedback_id(record, reason):
    decision = bounces.decide(bounces.AddressState(), record, POLICY)
    assert decision.kind == "suppress"
    assert decision.suppress == bounces.Suppress(reason, "fb-m1", "m1")


@pytest.mark.parametrize("record", [
    event("Delivery"), event("Send"), event("DeliveryDelay"), event("Reject"), event("Open"),
    event("Bounce", bounce_type="Undetermined"), event("Complaint", complaint_type="not-spam"),
])
def test_other_events_change_nothing(record):
    assert bounces.decide(bounces.AddressState(), record, POLICY) == bounces.Decision("ignored")


def test_the_same_event_twice_suppresses_once():
    hard = event("Bounce", bounce_type="Permanent")
    _, decisions = run(bounces.AddressState(), hard, hard, dict(hard, received_ms=T0 + 99))
    assert [d.kind for d in decisions] == ["suppress", "duplicate", "duplicate"]


def test_the_key_is_message_id_and_type():
    """A complaint about a message that also bounced is another event; a second bounce of
    another message is too (the operator may have lifted the first suppression)."""
    hard = event("Bounce", bounce_type="Permanent")
    _, decisions = run(bounces.AddressState(), hard, event("Complaint"),
                       event("Bounce", "m2", bounce_type="Permanent"))
    assert [d.kind for d in decisions] == ["suppress"] * 3
    assert bounces.idempotency_key(hard) == "m1:Bounce"


def soft(message: str, day: float) -> dict[str, Any]:
    return event("Bounce", message, int(T0 + day * DAY), bounce_type="Transient")


def test_the_third_soft_bounce_within_the_window_suppresses():
    state, decisions = run(bounces.AddressState(), soft("a", 0), soft("b", 3), soft("c", 6.9))
    assert [d.kind for d in decisions] == ["counted", "counted", "suppress"]
    assert decisions[-1].suppress == bounces.Suppress("soft_bounce", "fb-c", "c")
    assert state.soft == {}, "spent on the suppression: a lifted address starts counting again"


def test_soft_bounces_further_apart_than_the_window_do_not():
    _, decisions = run(bounces.AddressState(), soft("a", 0), soft("b", 4), soft("c", 7.5),
                       soft("d", 10.5))
    assert [d.kind for d in decisions] == ["counted", "counted", "counted", "suppress"]


def test_a_redelivered_soft_bounce_is_not_counted_again():
    _, decisions = run(bounces.AddressState(), soft("a", 0), soft("a", 0), soft("b", 1),
                       soft("b", 1))
    assert [d.kind for d in decisions] == ["counted", "duplicate", "counted", "duplicate"]


@pytest.mark.parametrize("order", list(itertools.permutations(range(4))))
def test_any_order_with_duplicates_suppresses_exactly_once(order):
    events = [soft("a", 0), soft("b", 2), soft("c", 5), event("Delivery", "d")]
    arrivals = [events[i] for i in order] + [events[i] for i in reversed(order)]
    state, decisions = run(bounces.AddressState(), *arrivals)
    assert [d.kind for d in decisions].count("suppress") == 1
    assert set(state.seen) == {"a:Bounce", "b:Bounce", "c:Bounce"}


def test_seen_keys_are_kept_for_the_retention_then_older_events_are_stale():
    late = int(T0 + 40 * DAY)
    state, decisions = run(bounces.AddressState(), event("Complaint", "old"),
                           event("Complaint", "new", late), event("Complaint", "old"))
    assert [d.kind for d in decisions] == ["suppress", "suppress", "stale"]
    assert set(state.seen) == {"new:Complaint"}, "the row stays bounded"


def test_the_policy_is_the_settings(monkeypatch):
    monkeypatch.setenv("CRONSTREAM_SOFT_BOUNCE_LIMIT", "5")
    monkeypatch.setenv("CRONSTREAM_SOFT_BOUNCE_WINDOW_DAYS", "2")
    from streams.runtime import settings

    class Rt:
        pass

    rt = Rt()
    rt.settings = settings.load()  # type: ignore[attr-defined]
    assert apply_feedback.policy_of(rt) == bounces.Policy(5, 2 * DAY)  # type: ignore[arg-type]


class Emitter:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[tuple[str, str, bytes | None, int | None]] = []
        self.fail = fail

    async def send(self, topic, key, value, partition=None, headers=None) -> None:
        if self.fail:
            raise RuntimeError("broker down")
        self.sent.append((topic.name, key, value, partition))


def test_the_agent_writes_the_suppression_the_api_writes_then_the_row():
    table: dict[bytes, bytes] = {}
    emitter = Emitter()
    hard = event("Bounce", bounce_type="Permanent")
    key = b"acme:a@example.org"
    for _ in range(2):
        asyncio.run(apply_feedback.apply(hard, key, table, emitter, POLICY, 8))
    assert len(emitter.sent) == 1, "a redelivery writes nothing"
    topic, sent_key, value, partition = emitter.sent[0]
    assert (topic, sent_key, partition) == (SUPPRESSIONS.name, "acme:a@example.org",
                                            partition_for("a@example.org", 8))
    assert codec().decode(value) == {
        "tenant": "acme", "email": "a@example.org", "reason": "bounce", "source": "feedback",
        "created_ms": T0 + 5, "feedback_id": "fb-m1", "ses_message_id": "m1"}
    assert set(bounces.AddressState.decode(table[key]).seen) == {"m1:Bounce"}


def test_a_suppression_not_written_leaves_the_event_unseen():
    table: dict[bytes, bytes] = {}
    with pytest.raises(RuntimeError):
        asyncio.run(apply_feedback.apply(event("Complaint"), b"k", table, Emitter(fail=True),
                                         POLICY, 8))
    assert table == {}, "applied again when the record is delivered again"


def test_an_old_suppression_record_reads_with_no_feedback_fields():
    """Suppressions written before the fields existed (schemas/history/suppression.1.avsc)."""
    schema = json.loads((SCHEMAS_DIR / "history" / "suppression.1.avsc").read_text())
    parsed = fastavro.parse_schema(schema)
    header = Codec._parse(schema)[1]  # noqa: SLF001 - the old schema's single-object header
    body = io.BytesIO()
    row = {"tenant": "t", "email": "e@x.org", "reason": "r", "source": "api", "created_ms": 1}
    fastavro.schemaless_writer(body, parsed, row)
    assert codec().decode(header + body.getvalue()) == {**row, "feedback_id": None,
                                                        "ses_message_id": None}
