"""Issue 30: a recipient recorded ``unknown`` (SES took the request, the answer never came) is
resolved to sent by SES's own events of its message, whether the event arrives after the
walker recorded the chunk or before; until then it is listed by ``GET /v1/campaigns/{id}/unknown``;
it is never sent again. The local SES server accepts every call, then holds the answer past the
client's 10 s read timeout."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.integration.helpers import ses_faults
from tests.integration.test_campaigns import campaign_body, outcomes, ses_log_end, ses_sent, upload
from tests.integration.test_feedback_suppressions import SQL_QUERIES, sql
from tests.waiting import wait_for

pytestmark = pytest.mark.integration
N = 60
UNKNOWN_SQL = next(q for q in SQL_QUERIES if "outcome = 'unknown'" in q)


def subscribe(stack, **config: float) -> None:
    answer = httpx.post(f"{stack.s.ses_endpoint}/_local/events", timeout=30, json={
        "endpoint": f"{stack.s.api_url}/v1/feedback/sns", "reorder": True, "seed": 5,
        "event_types": ["Send", "Delivery"], **config}).json()
    assert answer["confirmed"] and answer["confirmation_answer"] == 200, answer


def unsubscribe(stack) -> None:
    httpx.post(f"{stack.s.ses_endpoint}/_local/events", json={"endpoint": None}, timeout=30)


def start(api, label: str) -> tuple[str, list[str]]:
    emails = [f"held{i}-{label}@example.org" for i in range(N)]
    created = api.post("/v1/campaigns", json=campaign_body(seconds=1)).json()
    assert upload(api, created["id"], "email\n" + "".join(f"{e}\n" for e in emails))[
        "recipients"] == N
    assert api.post(f"/v1/campaigns/{created['id']}/schedule").status_code == 200
    return str(created["id"]), emails


def ledger(stack, campaign_id: str) -> dict[str, tuple[str, str, str]]:
    """email → (outcome, reason, message id) from Postgres."""
    import psycopg

    with psycopg.connect(stack.s.pg_dsn) as conn:
        rows = conn.execute("SELECT email, outcome, reason, message_id FROM ledger WHERE "
                            "campaign_id = %s", (campaign_id,)).fetchall()
    return {r[0]: (r[1], r[2] or "", r[3] or "") for r in rows}


def unknown_listed(api, campaign_id: str) -> list[dict]:
    items, after = [], ""
    while True:
        page = api.get(f"/v1/campaigns/{campaign_id}/unknown",
                       params={"limit": 25, "after": after}).json()
        items += page["items"]
        if page["next_after"] is None:
            return items
        after = page["next_after"]


def sent_once(stack, since: int, emails: list[str]) -> dict[str, str]:
    """email → the message id SES gave it, asserting SES took each address exactly once."""
    mails = [m for m in ses_sent(stack, since=since) if m["to"] in set(emails)]
    assert sorted(m["to"] for m in mails) == sorted(emails), "each address reached SES once"
    return {m["to"]: m["message_id"] for m in mails}


def test_events_after_the_record_resolve_unknown_recipients_listed_until_then(stack, api):
    label, since = uuid.uuid4().hex[:8], ses_log_end(stack)
    subscribe(stack, min_delay_s=25, delay_s=2)  # the events come after the 10 s timeout
    try:
        with ses_faults(stack, timeout_after_accept_ratio=1.0, timeout_s=12, seconds=60):
            campaign_id, emails = start(api, label)
            wait_for(lambda: len(outcomes(stack, campaign_id)) == N, timeout_s=60)
        assert set(outcomes(stack, campaign_id).values()) == {"unknown"}
        listed = unknown_listed(api, campaign_id)
        assert sorted(i["email"] for i in listed) == sorted(emails), "every unknown is listed"
        assert {i["state"] for i in listed} == {"awaiting_events"}
        documented = sql(stack, UNKNOWN_SQL, tenant=api.tenant, campaign_id=campaign_id,
                         window_s="86400")
        assert [(r[0], r[3]) for r in documented] == [(e, False) for e in sorted(emails)]
        wait_for(lambda: set(outcomes(stack, campaign_id).values()) == {"sent"}, timeout_s=90,
                 explain=lambda: f"{outcomes(stack, campaign_id)}")
    finally:
        unsubscribe(stack)
    message_ids = sent_once(stack, since, emails)
    rows = ledger(stack, campaign_id)
    assert {e: r[2] for e, r in rows.items()} == message_ids, "SES's own message ids"
    assert all(" event of message " in r[1] for r in rows.values()), rows
    assert unknown_listed(api, campaign_id) == []
    counts = api.get(f"/v1/campaigns/{campaign_id}").json()["counts"]
    assert (counts["sent"], counts["unknown"]) == (N, 0), counts


def test_events_before_the_record_resolve_the_chunk_as_it_is_recorded(stack, api):
    label, since = uuid.uuid4().hex[:8], ses_log_end(stack)
    subscribe(stack, delay_s=0.5)  # the events come while the call still waits for its answer
    try:
        with ses_faults(stack, timeout_after_accept_ratio=1.0, timeout_s=12, seconds=60):
            campaign_id, emails = start(api, label)
            wait_for(lambda: len(outcomes(stack, campaign_id)) == N, timeout_s=60)
    finally:
        unsubscribe(stack)
    rows = ledger(stack, campaign_id)
    assert {r[0] for r in rows.values()} == {"sent"}, "never recorded unknown"
    assert all(r[1].startswith("resolved: SES reported an event") for r in rows.values()), rows
    assert {e: r[2] for e, r in rows.items()} == sent_once(stack, since, emails)
