"""What SES events do (issue 30, item 2), on the real stack: a campaign sent through the local SES
server to its mailbox simulator, whose events come back through SNS (subscribed to the API,
every message delivered twice, delayed and reordered), leaves its bounced and complained
addresses suppressed with their reason and SES ids; a second campaign to the same list does not
mail them; the same SES event delivered again under a new SNS message id changes nothing, not
even after the suppression was lifted; and the third soft bounce in the window suppresses."""

from __future__ import annotations

import json
import re
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from stack.sns_publisher import CERT_PATH, LOCAL_TOPIC_ARN
from streams.runtime.codec import codec
from streams.runtime.kafka_config import client_config
from streams.topology import SUPPRESSIONS, partition_for
from tests.conftest import cluster_partitions
from tests.integration.test_campaigns import campaign_body, outcomes, ses_log_end, ses_sent, upload
from tests.waiting import wait_for

pytestmark = pytest.mark.integration
SIM = "simulator.amazonses.com"


def read_suppressions(bootstrap: str, keys: list[str]) -> list[dict[str, Any]]:
    """Every record (tombstones as None) of ``keys`` on the suppressions topic, in order (run in
    a child: ``stack.isolated``)."""
    consumer = Consumer({**client_config(bootstrap), "group.id": str(uuid.uuid4()),
                         "enable.partition.eof": True, "enable.auto.commit": False})
    count = cluster_partitions()
    parts = sorted({partition_for(k.split(":", 1)[1], count) for k in keys})
    consumer.assign([TopicPartition(SUPPRESSIONS.name, p, 0) for p in parts])
    found, at_end, deadline = [], set(), time.monotonic() + 30
    try:
        while len(at_end) < len(parts) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                    continue
                if msg.key().decode() in keys:
                    found.append({"key": msg.key().decode(), "value": None if msg.value() is None
                                  else codec().decode(msg.value())})
    finally:
        consumer.close()
    return found


def suppression_records(stack, tenant: str, emails: list[str]) -> list[dict[str, Any]]:
    from stack import isolated

    return isolated.call(f"{__name__}:read_suppressions", stack.s.bootstrap,
                         [f"{tenant}:{e}" for e in emails], timeout_s=60)


@pytest.fixture
def subscribed(stack):
    """The local SES server publishing to the API as SNS may: every message twice, each delayed
    up to 1 s in any order."""
    answer = httpx.post(f"{stack.s.ses_endpoint}/_local/events", timeout=30, json={
        "endpoint": f"{stack.s.api_url}/v1/feedback/sns", "duplicate_ratio": 1.0, "delay_s": 1.0,
        "reorder": True, "seed": 2}).json()
    assert answer["confirmed"] and answer["confirmation_answer"] == 200, answer
    yield answer
    httpx.post(f"{stack.s.ses_endpoint}/_local/events", json={"endpoint": None}, timeout=30)


def events_settled(stack) -> bool:
    return httpx.get(f"{stack.s.ses_endpoint}/_local/events", timeout=10).json()["pending"] == 0


def post_event(stack, event: dict[str, Any]) -> dict[str, Any]:
    """``event`` as a new SNS notification (a fresh SNS MessageId), signed as the local server
    signs: what SNS redelivering an SES event it got twice looks like to the API."""
    message = {"Type": "Notification", "MessageId": str(uuid.uuid4()), "TopicArn": LOCAL_TOPIC_ARN,
               "Message": json.dumps(event), "Timestamp": datetime.now(UTC).isoformat(),
               "SigningCertURL": stack.s.ses_endpoint + CERT_PATH}
    signed = httpx.post(f"{stack.s.ses_endpoint}/_local/sns/sign", json={"message": message},
                        timeout=10).json()
    answer = httpx.post(f"{stack.s.api_url}/v1/feedback/sns", content=json.dumps(signed),
                        headers={"content-type": "text/plain; charset=UTF-8"}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def bounce(tenant: str, to: str, message_id: str, bounce_type: str = "Permanent",
           feedback_id: str | None = None) -> dict[str, Any]:
    now = datetime.now(UTC).isoformat()
    return {"eventType": "Bounce", "mail": {
        "messageId": message_id, "destination": [to], "timestamp": now,
        "tags": {"cronstream-tenant": [tenant]}}, "bounce": {
        "bounceType": bounce_type, "bounceSubType": "General", "timestamp": now,
        "feedbackId": feedback_id or f"fb-{uuid.uuid4().hex}",
        "bouncedRecipients": [{"emailAddress": to, "status": "4.2.2" if bounce_type ==
                               "Transient" else "5.1.1"}]}}


def settle(stack, api, tenant: str, email: str) -> None:
    """Wait until the feedback agent has applied every event of ``email``'s partition posted so
    far: a hard bounce of another address of that partition, posted now, is applied after them."""
    label = uuid.uuid4().hex[:8]
    count = cluster_partitions()
    marker = next(m for i in range(10_000)
                  if partition_for(m := f"marker{i}-{label}@example.org", count)
                  == partition_for(email, count))
    assert post_event(stack, bounce(tenant, marker, f"marker-{label}"))["written"] == 1
    wait_for(lambda: suppression(api, marker), timeout_s=60)


SQL_QUERIES = re.findall(r"```sql\n(.*?)```", (Path(__file__).resolve().parents[2] / "docs"
                                                / "sql.md").read_text(), re.S)
DELIVERY_SQL, FEEDBACK_SQL = SQL_QUERIES[-2:]  # docs/sql.md's last two: the delivery queries


def sql(stack, query: str, **values: str) -> list[tuple]:
    from tests.integration.test_sql_docs import run

    return run(stack, query, **values)


def original(stack, tenant: str, ses_message_id: str, email: str) -> dict[str, Any]:
    """The SES Bounce event as SNS first delivered it (the feedback topic keeps it whole)."""
    from tests.integration.test_ses_feedback import feedback_of

    raw = wait_for(lambda: next((r["raw"] for r in feedback_of(stack, tenant)
                                 if (r["ses_message_id"], r["email"], r["event_type"])
                                 == (ses_message_id, email, "Bounce")), None), timeout_s=60)
    event: dict[str, Any] = json.loads(raw)
    return event


def suppression(api, email: str) -> dict[str, Any] | None:
    answer = api.get(f"/v1/suppressions/{email}")
    return answer.json() if answer.status_code == 200 else None


def run_to_the_end(stack, api, emails: list[str]) -> str:
    created = api.post("/v1/campaigns", json=campaign_body(seconds=2)).json()
    report = upload(api, created["id"], "email\n" + "".join(f"{e}\n" for e in emails))
    assert report["recipients"] == len(emails)
    assert api.post(f"/v1/campaigns/{created['id']}/schedule").json()["status"] == "scheduled"
    wait_for(lambda: len(outcomes(stack, created["id"])) == len(emails), timeout_s=180,
             every_s=1)
    return str(created["id"])


def test_bounces_and_complaints_suppress_once_and_the_next_campaign_skips_them(
        stack, api, subscribed):
    tenant, label = api.tenant, uuid.uuid4().hex[:8]
    hard = [f"bounce+{label}@{SIM}", f"suppressionlist+{label}@{SIM}"]
    complained = f"complaint+{label}@{SIM}"
    fine = [f"success+{label}@{SIM}", f"ooto+{label}@{SIM}"] + [
        f"reader{i}-{label}@example.org" for i in range(20)]
    everyone = hard + [complained] + fine
    start = ses_log_end(stack)
    first = run_to_the_end(stack, api, everyone)
    mails = [m for m in ses_sent(stack, since=start) if m["to"] in everyone]
    assert sorted(m["to"] for m in mails) == sorted(everyone)
    wait_for(lambda: events_settled(stack), timeout_s=60)

    wait_for(lambda: all(suppression(api, e) for e in [*hard, complained]), timeout_s=60)
    for email, reason in [(hard[0], "bounce"), (hard[1], "bounce"), (complained, "complaint")]:
        got = suppression(api, email)
        assert got is not None and (got["reason"], got["source"]) == (reason, "feedback"), got
        assert got["feedback_id"].startswith("local-fb-")
        sent = api.get(f"/v1/campaigns/{first}/recipients/{email}").json()
        assert got["ses_message_id"] == sent["message_id"], "the suppression names the mail"
    assert [e for e in fine if suppression(api, e)] == [], "deliveries suppress nothing"
    records = suppression_records(stack, tenant, [*hard, complained])
    assert len(records) == 3, "every SNS message came twice; each address suppressed once"

    # the same SES bounce again, as a new SNS message: written to the feedback topic, no effect
    bounced = suppression(api, hard[0])
    assert bounced is not None
    assert post_event(stack, original(stack, tenant, bounced["ses_message_id"], hard[0]))["written"] == 1
    # and after the operator lifted the suppression, still none: the event was spent
    assert api.delete(f"/v1/suppressions/{hard[1]}").status_code == 204
    lifted = suppression_records(stack, tenant, [hard[1]])[0]["value"]
    assert post_event(stack, original(stack, tenant, lifted["ses_message_id"], hard[1]))["written"] == 1
    settle(stack, api, tenant, hard[0])
    settle(stack, api, tenant, hard[1])
    assert len(suppression_records(stack, tenant, [hard[0]])) == 1
    assert [r["value"] is None for r in suppression_records(stack, tenant, [hard[1]])] == [
        False, True], "a redelivered event suppressed a lifted address again"

    # counts and SQL agree with the events: 2 hard bounces, 1 complaint, the rest delivered
    delivered = len(fine) + 1  # the complaint was delivered first
    counts = wait_for(lambda: (c := api.get(f"/v1/campaigns/{first}").json()["counts"])
                      and c["delivered"] == delivered and c["bounced"] == 2 and c, timeout_s=60)
    assert (counts["sent"], counts["complained"]) == (len(everyone), 1), counts
    one = api.get(f"/v1/campaigns/{first}/recipients/{complained}").json()
    assert (one["outcome"], one["delivery_status"]) == ("sent", "complained"), one
    one = api.get(f"/v1/campaigns/{first}/recipients/{hard[0]}").json()
    assert (one["outcome"], one["delivery_status"]) == ("sent", "bounced"), one
    assert "5.1.1" in one["delivery_diagnostic"]
    [rates] = sql(stack, DELIVERY_SQL, tenant=tenant, campaign_id=first)
    assert rates[:4] == (len(everyone), delivered, 2, 1), rates
    assert float(rates[4]) == round(100 * 2 / len(everyone), 2)
    by_feedback = {r[0] for r in sql(stack, FEEDBACK_SQL, tenant=tenant)}
    assert {*hard, complained} <= by_feedback  # and the markers settle() bounced
    assert all(e.startswith("marker") for e in by_feedback - {*hard, complained})

    start = ses_log_end(stack)
    second = run_to_the_end(stack, api, everyone)
    mailed = {m["to"] for m in ses_sent(stack, since=start) if m["to"] in everyone}
    assert mailed == set(fine) | {hard[1]}, "only the lifted address and the fine ones"
    assert {e: o for e, o in outcomes(stack, second).items() if o != "sent"} == {
        hard[0]: "suppressed", complained: "suppressed"}


def test_the_third_soft_bounce_within_the_window_suppresses(stack, api):
    tenant, label = api.tenant, uuid.uuid4().hex[:8]
    flaky, twice = f"flaky-{label}@example.org", f"twice-{label}@example.org"
    for n in range(2):
        post_event(stack, bounce(tenant, flaky, f"soft-{label}-{n}", "Transient"))
        post_event(stack, bounce(tenant, twice, f"soft2-{label}-{n}", "Transient"))
    post_event(stack, bounce(tenant, twice, f"soft2-{label}-0", "Transient"))  # SES event again
    last = bounce(tenant, flaky, f"soft-{label}-2", "Transient")
    post_event(stack, last)
    got = wait_for(lambda: suppression(api, flaky), timeout_s=60)
    assert (got["reason"], got["ses_message_id"]) == ("soft_bounce", f"soft-{label}-2")
    assert got["feedback_id"] == last["bounce"]["feedbackId"]
    settle(stack, api, tenant, twice)
    assert suppression(api, twice) is None, "two soft bounces (one delivered twice) are two"
