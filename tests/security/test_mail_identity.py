"""Mail in another tenant's name (issue 40): the SES account is shared, so a tenant sends only
as the identities the operator granted it, only through its own IP pools, and through
configuration sets no other tenant's name can also spell. Judged from the local SES server's
own log of the mail it accepted."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from stack import isolated
from tests.conftest import make_client
from tests.integration.test_campaigns import (
    campaign_body,
    csv_lines,
    outcomes,
    ses_log_end,
    ses_sent,
    upload,
)
from tests.waiting import wait_for


def _campaign(api, **changes) -> dict:
    response = api.post("/v1/campaigns", json=campaign_body(**changes))
    return {**response.json(), "http": response.status_code}


def test_a_tenant_cannot_create_mail_from_an_identity_it_was_not_granted(stack):
    with make_client(stack, senders=["mine.example", "team@ours.example"]) as api:
        assert _campaign(api, **{"from": "news@mine.example"})["http"] == 201
        assert _campaign(api, **{"from": "team@ours.example"})["http"] == 201
        for sender in ("ceo@theirs.example", "news@sub.mine.example", "other@ours.example"):
            refused = _campaign(api, **{"from": sender})
            assert refused["http"] == 422, (sender, refused)
            assert refused["detail"][0]["loc"] == ["body", "from"], refused
        reminder = api.post("/v1/jobs", json={"schedule": {"cron": "0 0 1 1 *"}, "target": {
            "type": "email", "to": "a@example.org", "from": "ceo@theirs.example",
            "subject": "s", "text": "t"}})
        assert reminder.status_code == 422, reminder.text
        assert reminder.json()["detail"][0]["loc"] == ["body", "target", "from"]


def test_a_tenant_cannot_send_through_an_ip_pool_it_was_not_granted(stack):
    with make_client(stack, pools=["vip"]) as api:
        assert _campaign(api, ip_pool="vip")["http"] == 201
        assert _campaign(api, ip_pool="default")["http"] == 201
        refused = _campaign(api, ip_pool="someone-elses")
        assert refused["http"] == 422 and refused["detail"][0]["loc"] == ["body", "ip_pool"]


def test_two_tenants_pools_never_share_a_configuration_set(stack):
    """Tenant ``X`` with pool ``corp-p`` and tenant ``X-corp`` with pool ``p`` were both
    ``cronstream-X-corp-p``: one's mail went through the other's IPs and reputation."""
    first = f"t{uuid.uuid4().hex[:8]}"
    subject = f"pools {uuid.uuid4().hex[:8]}"
    start = ses_log_end(stack)
    with make_client(stack, name=first, pools=["corp-p"]) as a, \
            make_client(stack, name=f"{first}-corp", pools=["p"]) as b:
        for api, pool in ((a, "corp-p"), (b, "p")):
            created = _campaign(api, ip_pool=pool, subject=subject, seconds=1)
            upload(api, created["id"], csv_lines(2, domain="example.org"))
            assert api.post(f"/v1/campaigns/{created['id']}/schedule").status_code == 200
        sent = wait_for(lambda: (m := [x for x in ses_sent(stack, start) if x["subject"] == subject])
                        and len(m) == 4 and m, timeout_s=120)
    sets = {m["configuration_set"] for m in sent}
    assert len(sets) == 2, f"both tenants' mail went through {sets}"


def test_a_sender_revoked_before_the_send_sends_nothing(stack):
    with make_client(stack, senders=["example.com"]) as api:
        subject = f"revoked {uuid.uuid4().hex[:8]}"
        send_at = datetime.now(UTC) + timedelta(seconds=2)
        created = _campaign(api, subject=subject, send_at=send_at.isoformat())
        assert created["http"] == 201, created
        upload(api, created["id"], csv_lines(5))
        # the operator takes the grant back (the tenant's key kept)
        isolated.call("streams.adapters.tenants:update", stack.s.bootstrap, api.tenant,
                      timeout_s=120, partitions=stack.s.partitions,
                      revoke_senders=["example.com"])
        start = ses_log_end(stack)
        assert api.post(f"/v1/campaigns/{created['id']}/schedule").status_code == 200
        done = wait_for(lambda: (o := outcomes(stack, created["id"])) and len(o) == 5 and o,
                        timeout_s=120)
    assert set(done.values()) == {"failed"}, done
    assert [m for m in ses_sent(stack, start) if m["subject"] == subject] == []
