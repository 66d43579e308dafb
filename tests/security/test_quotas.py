"""Per-tenant quotas hold, even for concurrent requests (issue 40): the job quota was checked
before the write's await, so simultaneous creates all passed it; campaigns, recipients and
suppressions had no quota at all. Judged from what the API then lists and from the topics."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from tests.conftest import make_client
from tests.integration.test_campaigns import campaign_body, csv_lines

JOB = {"schedule": {"cron": "0 0 1 1 *"}, "target": {"type": "webhook",
                                                      "url": "http://127.0.0.1:9/hook"}}


def test_simultaneous_creates_never_take_a_tenant_past_its_job_quota(stack):
    with make_client(stack, max_jobs=3) as api, ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda _: api.post("/v1/jobs", json=JOB).status_code, range(12)))
        listed = api.get("/v1/jobs").json()["items"]
    assert sorted(answers) == [201] * 3 + [403] * 9, answers
    assert len(listed) == 3


def test_campaigns_recipients_and_suppressions_have_quotas(stack):
    with make_client(stack, max_campaigns=2, max_recipients=10, max_suppressions=2) as api:
        first = api.post("/v1/campaigns", json=campaign_body(seconds=3600)).json()
        assert api.post("/v1/campaigns", json=campaign_body(seconds=3600)).status_code == 201
        third = api.post("/v1/campaigns", json=campaign_body(seconds=3600))
        assert third.status_code == 403 and "quota of 2 campaigns" in third.text
        over = api.put(f"/v1/campaigns/{first['id']}/recipients", content=csv_lines(11),
                       headers={"content-type": "text/csv"})
        assert over.status_code == 403 and "10 recipients" in over.text, over.text
        assert api.get(f"/v1/campaigns/{first['id']}").json()["status"] == "aborted"
        fits = api.put(f"/v1/campaigns/{first['id']}/recipients", content=csv_lines(10),
                       headers={"content-type": "text/csv"})
        assert fits.status_code == 200 and fits.json()["recipients"] == 10
        for i in range(2):
            assert api.post("/v1/suppressions", json={"email": f"s{i}@example.org"}
                            ).status_code == 201
        again = api.post("/v1/suppressions", json={"email": "s0@example.org"})
        assert again.status_code == 201, "suppressing an address again adds nothing"
        refused = api.post("/v1/suppressions", json={"email": "s2@example.org"})
        assert refused.status_code == 403 and "quota of 2 suppressions" in refused.text
