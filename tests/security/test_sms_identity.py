"""Texts in another tenant's name (issue 45): the End User Messaging account is shared, so a
tenant texts only from the originations the operator granted it (``tenants.sms_refused``),
checked at creation and again at each send. Judged from the local SMS server's own log."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from stack import isolated
from tests.conftest import make_client
from tests.integration.helpers import ledger, sms_log_end, sms_sent
from tests.waiting import wait_for

OURS, THEIRS = "+18005550111", "+18005550122"


def text(to: str, origination: str | None, seconds: float = 3600) -> dict:
    at = (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()
    target = {"type": "sms", "to": to, "body": "Your code is 123456"}
    if origination is not None:
        target["origination"] = origination
    return {"schedule": {"at": at}, "target": target}


def test_a_tenant_cannot_text_from_an_origination_it_was_not_granted(stack):
    with make_client(stack, sms_originations=[OURS]) as api, \
            make_client(stack, sms_originations=[THEIRS]):
        assert api.post("/v1/jobs", json=text("+15551238001", OURS)).status_code == 201
        for origination in (THEIRS, None, "pool-" + "0" * 32, "AcmeAlerts"):
            refused = api.post("/v1/jobs", json=text("+15551238001", origination))
            assert refused.status_code == 422, (origination, refused.text)
            assert refused.json()["detail"][0]["loc"] == ["body", "target", "origination"]
        reminder = {**text("+15551238001", OURS), "target": {
            "type": "reminder", "channels": [
                {"type": "email", "to": "a@example.org", "from": "team@example.com",
                 "subject": "s", "text": "t"},
                {"type": "sms", "to": "+15551238001", "body": "b", "origination": THEIRS}]}}
        refused = api.post("/v1/jobs", json=reminder)
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"][0]["loc"] == ["body", "target", "channels", "1",
                                                      "origination"]


def test_an_origination_revoked_before_the_send_texts_nothing(stack):
    start = sms_log_end(stack)
    with make_client(stack, sms_originations=[OURS]) as api:
        created = api.post("/v1/jobs", json=text("+15551238002", OURS, seconds=10))
        assert created.status_code == 201, created.text
        # the operator takes the grant back (the tenant's key kept), before the slot is due
        isolated.call("streams.adapters.tenants:update", stack.s.bootstrap, api.tenant,
                      timeout_s=120, partitions=stack.s.partitions,
                      revoke_sms_originations=[OURS])
        [row] = wait_for(lambda: ledger(stack, job_id=created.json()["id"]), timeout_s=90)
    assert (row["outcome"], row["reason"]) == ("failed", "not sent: origination not granted"), row
    assert [t for t in sms_sent(stack, start) if t["to"] == "+15551238002"] == []
