"""Issue 30's acceptance at scale, on the real stack: a 20k-recipient campaign whose mail the local
SES server bounces (3 %, hard), complains about (0.05 %) and delays (1 %), its events delivered
through SNS as SNS may (10 % twice, out of order). Afterwards every bounced and complained address
is suppressed once, the campaign's counts and the documented SQL agree with the server's own
event log, and a second campaign to the same list mails none of them.

The event destination here publishes bounces, complaints and delays, not the 20k Send and
Delivery events: those are what the suite's small campaigns already check
(``test_feedback_suppressions.py``), and on a 2-core box shared with the whole stack they cost
minutes."""

from __future__ import annotations

import json
import uuid
from collections import defaultdict

import httpx
import pytest

from tests.integration.test_campaigns import campaign_body, outcomes, ses_log_end, ses_sent, upload
from tests.integration.test_feedback_suppressions import (
    DELIVERY_SQL,
    FEEDBACK_SQL,
    events_settled,
    sql,
    suppression_records,
)
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
N = 20_000


def send(api, emails: list[str]) -> str:
    created = api.post("/v1/campaigns", json=campaign_body(seconds=2, max_rate_per_s=2000)).json()
    assert upload(api, created["id"], "email\n" + "".join(f"{e}\n" for e in emails))[
        "recipients"] == len(emails)
    assert api.post(f"/v1/campaigns/{created['id']}/schedule").status_code == 200
    return str(created["id"])


def events_since(stack, start: int, domain: str) -> dict[str, set[str]]:
    """event type → the addresses of ``domain`` the local SES server published it for (its
    own log: each event once, whatever SNS did with it)."""
    log = stack.ses_log.with_name("events.jsonl")
    found: dict[str, set[str]] = defaultdict(set)
    with log.open("rb") as lines:
        lines.seek(start)
        for line in lines.read().splitlines():
            event = json.loads(line)
            assert event["answer"] == 200, event
            for address in event["recipients"]:
                if address.endswith(f"@{domain}"):
                    found[event["event_type"]].add(address)
    return found


def suppressed_by_feedback(api) -> dict[str, str]:
    """address → reason of every suppression of the tenant made by SES feedback."""
    found, cursor = {}, None
    while True:
        page = api.get("/v1/suppressions", params={"limit": 500, **(
            {"cursor": cursor} if cursor else {})}).json()
        found.update({s["email"]: s["reason"] for s in page["items"] if s["source"] == "feedback"})
        if (cursor := page["next_cursor"]) is None:
            return found


def test_a_20k_campaign_with_bounces_and_complaints_suppresses_each_once(stack, api):
    domain = f"{uuid.uuid4().hex[:8]}.feedback.example"
    emails = [f"r{i}@{domain}" for i in range(N)]
    events_log = stack.ses_log.with_name("events.jsonl")
    events_start = events_log.stat().st_size if events_log.exists() else 0
    answer = httpx.post(f"{stack.s.ses_endpoint}/_local/events", timeout=30, json={
        "endpoint": f"{stack.s.api_url}/v1/feedback/sns", "duplicate_ratio": 0.1,
        "delay_s": 1.0, "reorder": True, "seed": 30, "delivery_delay_ratio": 0.01,
        "event_types": ["Bounce", "Complaint", "DeliveryDelay"],
        "rates": [{"pattern": f"*@{domain}", "bounce": 0.03, "complaint": 0.0005}]}).json()
    assert answer["confirmed"], answer
    try:
        first = send(api, emails)
        wait_for(lambda: len(outcomes(stack, first)) == N, timeout_s=300, every_s=2)
        wait_for(lambda: events_settled(stack), timeout_s=300, every_s=2)
    finally:
        httpx.post(f"{stack.s.ses_endpoint}/_local/events", json={"endpoint": None}, timeout=30)
    assert set(outcomes(stack, first).values()) == {"sent"}
    events = events_since(stack, events_start, domain)
    bounced, complained, delayed = events["Bounce"], events["Complaint"], events["DeliveryDelay"]
    assert 0.02 * N < len(bounced) < 0.04 * N and complained and delayed, {
        k: len(v) for k, v in events.items()}
    assert not bounced & complained

    # every bounced and complained address suppressed, with its reason, once
    wanted = {**dict.fromkeys(bounced, "bounce"), **dict.fromkeys(complained, "complaint")}
    wait_for(lambda: suppressed_by_feedback(api) == wanted, timeout_s=120, every_s=2,
             explain=lambda: f"{len(suppressed_by_feedback(api))} of {len(wanted)} suppressed")
    records = suppression_records(stack, api.tenant, sorted(wanted))
    assert len(records) == len(wanted), "an event SNS delivered twice suppressed once"

    # the campaign's counts and the documented SQL agree with the server's event log
    expected = {"delivered": 0, "bounced": len(bounced), "complained": len(complained)}
    wait_for(lambda: {k: api.get(f"/v1/campaigns/{first}").json()["counts"][k]
                      for k in expected} == expected, timeout_s=120, every_s=2)
    [rates] = sql(stack, DELIVERY_SQL, tenant=api.tenant, campaign_id=first)
    # with_events, delivered (a complaint counts: its mail was delivered), bounced, complained
    assert rates[:4] == (len(bounced | complained | delayed), len(complained), len(bounced),
                         len(complained)), rates
    assert float(rates[4]) == round(100 * len(bounced) / N, 2)
    newest = [r[0] for r in sql(stack, FEEDBACK_SQL, tenant=api.tenant)]  # its LIMIT 100
    assert len(newest) == len(set(newest)) == min(100, len(wanted)) and set(newest) <= set(wanted)

    # a second campaign to the same list mails none of them
    start = ses_log_end(stack)
    second = send(api, emails)
    wait_for(lambda: len(outcomes(stack, second)) == N, timeout_s=300, every_s=2)
    mailed = {m["to"] for m in ses_sent(stack, since=start) if m["to"].endswith(f"@{domain}")}
    assert mailed == set(emails) - set(wanted)
    assert {e for e, o in outcomes(stack, second).items() if o == "suppressed"} == set(wanted)
