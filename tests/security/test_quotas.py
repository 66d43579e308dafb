"""Per-tenant quotas hold, even for concurrent requests (issue 40): the job quota was checked
before the write's await, so simultaneous creates all passed it; campaigns, recipients,
suppressions and fires per second had no quota at all. Judged from what the API then lists,
from the topics, and for fires from the webhook receiver's own log of when each call came."""

from __future__ import annotations

from bisect import bisect_left
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from cli.demo import Receiver
from tests.conftest import free_port, make_client
from tests.integration.test_campaigns import campaign_body, csv_lines
from tests.integration.test_run_isolation import LEAD_S, one_off, settled

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


FIRES_PER_S = 5
BURST = FIRES_PER_S  # one second's worth (streams.execution.fire_quota)
SPIKE = 60


def test_a_tenant_past_its_fires_per_second_waits_and_its_late_slots_expire_saying_so(stack):
    """60 one-off jobs of a tenant held to 5 fires/s, due in the same second: the receiver never
    sees more than the rate and its burst in any one second (whatever the executors' share of
    the partitions, their shares add up to the rate), and every slot has one decision: run, or
    expired past its max_lateness_s with the quota named as what held it."""
    port = free_port()
    with make_client(stack, max_fires_per_s=FIRES_PER_S) as api, \
            Receiver(port, quiet=True) as receiver:
        at = datetime.now(UTC) + timedelta(seconds=LEAD_S)
        for _ in range(SPIKE):
            one_off(api, at, port, retry={"max_attempts": 1},
                    misfire={"policy": "fire_once", "max_lateness_s": 4})
        rows = settled(stack, api.tenant, SPIKE)
    arrived = sorted(receiver.arrived_ms)
    busiest = max((bisect_left(arrived, t + 1000) - i for i, t in enumerate(arrived)), default=0)
    assert busiest <= FIRES_PER_S + BURST, f"{busiest} calls in one second at {FIRES_PER_S}/s"
    ran = {r["fire_id"] for r in rows if r["outcome"] == "succeeded"}
    expired = [r for r in rows if r["decision"] == "expired_stale"]
    assert len({r["job_id"] for r in rows}) == SPIKE and len(ran) + len(expired) == SPIKE, \
        [r for r in rows if r["fire_id"] not in ran and r["decision"] != "expired_stale"]
    assert all(r["reason"].startswith("fires-per-second quota: ") for r in expired), expired[:3]
    assert expired, "60 slots at 5/s within 4 s of lateness: the quota must have held some"
    assert sorted(receiver.fires) == sorted(ran), "each run called once, nothing else called"
