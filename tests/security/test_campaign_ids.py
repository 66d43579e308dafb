"""Campaign ids are the tenant's own (issue 40). With global ids a tenant learned from a 409
that another's id existed, could take an id before its owner did, and two campaigns' ledger
rows shared the key ``<campaign>:<email>``. Judged from the ledger in PostgreSQL and the SES
server's log: both tenants' mail went, each recorded apart."""

from __future__ import annotations

import uuid

import psycopg

from tests.conftest import make_client
from tests.integration.test_campaigns import campaign_body, ses_log_end, ses_sent, upload
from tests.waiting import wait_for


def _rows(stack, tenant: str, address: str) -> list[tuple]:
    with psycopg.connect(stack.s.pg_dsn) as conn:
        return conn.execute("SELECT record_id, campaign_id, outcome FROM ledger WHERE "
                            "kind = 'campaign' AND tenant = %s AND email = %s",
                            (tenant, address)).fetchall()


def test_two_tenants_may_use_one_campaign_id_and_their_mail_is_recorded_apart(stack):
    chosen = f"launch-{uuid.uuid4().hex[:6]}"
    address = f"same-{uuid.uuid4().hex[:6]}@example.org"
    start = ses_log_end(stack)
    with make_client(stack) as first, make_client(stack) as second:
        for api in (first, second):
            created = api.post("/v1/campaigns", json=campaign_body(
                seconds=1, id=chosen, subject=f"{chosen} {api.tenant}"))
            assert created.status_code == 201, created.text
            assert created.json()["id"] == chosen
            upload(api, chosen, f"email\n{address}\n")
            assert api.post(f"/v1/campaigns/{chosen}/schedule").status_code == 200
        for api in (first, second):
            wait_for(lambda api=api: _rows(stack, api.tenant, address), timeout_s=120)
            seen = api.get(f"/v1/campaigns/{chosen}/recipients/{address}").json()
            assert seen["outcome"] == "sent", seen
    sent = [m for m in ses_sent(stack, start) if m["subject"].startswith(chosen)]
    assert sorted(m["subject"] for m in sent) == sorted(f"{chosen} {t}" for t in
                                                        (first.tenant, second.tenant))
    for api in (first, second):
        [(record_id, campaign_id, outcome)] = _rows(stack, api.tenant, address)
        assert campaign_id == f"{api.tenant}_{chosen}" and outcome == "sent"
