"""A tenant can never read or change another tenant's jobs, campaigns, runs or suppressions.

Every route of the API that names a job or a campaign is called by another tenant, with a valid
body, and must answer 404 (nothing about the resource leaks, not even that it exists). The routes
are enumerated from the application itself, so a route added later is covered automatically
(and a new route kind makes ``body_for`` fail until it is given a body). Suppressions are keyed
by tenant: another tenant deleting the same address leaves the owner's opt-out in force.
"""

from __future__ import annotations

import uuid

import httpx

from tests.api_routes import body_for, routes_with
from tests.conftest import make_client
from tests.integration.test_campaigns import campaign_body, outcomes, upload
from tests.waiting import wait_for


def test_every_job_and_campaign_route_hides_other_tenants_resources(stack, api):
    job = api.post("/v1/jobs", json={"schedule": {"cron": "0 0 1 1 *"}, "target": {
        "type": "webhook", "url": "http://127.0.0.1:9/x"}}).json()
    campaign = api.post("/v1/campaigns", json=campaign_body(seconds=3600)).json()
    upload(api, campaign["id"], "email\nowner@example.org\n")
    ids = {"job_id": job["id"], "campaign_id": campaign["id"], "email": "owner@example.org"}
    absent = {"job_id": str(uuid.uuid4()), "campaign_id": str(uuid.uuid4()),
              "email": "owner@example.org"}

    def neutral(text: str, values: dict[str, str]) -> str:
        return text.replace(values["job_id"], "ID").replace(values["campaign_id"], "ID")

    checked = []
    with make_client(stack) as other:
        for param in ("job_id", "campaign_id"):
            routes = routes_with(param)
            assert routes, param
            for method, path in routes:
                answer = other.request(method, path.format(**ids), **body_for(method, path))
                assert answer.status_code == 404, (method, path, answer.status_code, answer.text)
                # exactly what a resource that does not exist gets: existence does not leak
                missing = other.request(method, path.format(**absent), **body_for(method, path))
                assert neutral(answer.text, ids) == neutral(missing.text, absent), (method, path)
                checked.append((method, path))
        assert job["id"] not in str(other.get("/v1/jobs").json())
    assert len(checked) >= 15
    # the owner's resources are exactly as they were
    mine = api.get(f"/v1/jobs/{job['id']}").json()
    assert mine["revision"] == job["revision"] and not mine["paused"]
    assert api.get(f"/v1/campaigns/{campaign['id']}").json()["status"] == "ready"
    assert api.get(f"/v1/jobs/{job['id']}/runs").json()["items"] == []


def test_suppressions_are_per_tenant(stack, api):
    address = f"{uuid.uuid4().hex[:8]}@iso.example"
    assert api.post("/v1/suppressions", json={"email": address}).status_code == 201
    with make_client(stack) as other:
        assert other.delete(f"/v1/suppressions/{address}").status_code == 204  # its own: a no-op
    created = api.post("/v1/campaigns", json=campaign_body(seconds=1)).json()
    upload(api, created["id"], f"email\n{address}\nfine-{address}\n")
    api.post(f"/v1/campaigns/{created['id']}/schedule")
    done = wait_for(lambda: (o := outcomes(stack, created["id"])) and len(o) == 2 and o,
                    timeout_s=90)
    assert done == {address: "suppressed", f"fine-{address}": "sent"}


def test_operator_endpoints_refuse_tenant_keys(stack, api):
    assert httpx.get(f"{stack.s.api_url}/v1/ops/lag", headers=api.headers).status_code == 401


def test_quotas_stop_absurd_schedules_and_job_floods(stack):
    """`* * * * * *` times a million: refused by the tenant's minimum interval, and past its job
    quota every create is a 403 naming the quota, with nothing written."""
    with make_client(stack, max_jobs=3, min_interval_s=60) as api:
        every_second = {"schedule": {"cron": "* * * * * *"}, "target": {
            "type": "webhook", "url": "http://127.0.0.1:9/x"}}
        refused = api.post("/v1/jobs", json=every_second)
        assert refused.status_code == 422 and "minimum interval is 60s" in refused.text
        hourly = {**every_second, "schedule": {"cron": "0 * * * *"}}
        made = [api.post("/v1/jobs", json=hourly).status_code for _ in range(3)]
        over = api.post("/v1/jobs", json=hourly)
        assert made == [201] * 3 and over.status_code == 403
        assert "reached its quota of 3 jobs" in over.text
        assert len(api.get("/v1/jobs").json()["items"]) == 3
