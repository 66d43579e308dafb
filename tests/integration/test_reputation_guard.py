"""The reputation guard (issue 30, item 3), on the real stack: a tenant whose mail draws
complaints past the threshold has its running campaign paused, with a reason naming the rate and
a metric, while another tenant's campaign sends to the end; the operator's resume undoes it.

The stack runs with a guard that trips on a test's volume (tests/conftest.py: 10 sends per
partition, 20 % complaints); the local SES server draws a complaint for half the first tenant's
addresses (a ``rates`` rule on their pattern) and publishes every Send and Complaint to the API."""

from __future__ import annotations

import re
import uuid

import httpx
import pytest

from tests.conftest import make_client
from tests.integration.test_campaigns import campaign_body, outcomes, upload
from tests.waiting import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def complaining(stack):
    """Events published to the API, half of the addresses ending ``-hot@example.org``
    complaining."""
    answer = httpx.post(f"{stack.s.ses_endpoint}/_local/events", timeout=30, json={
        "endpoint": f"{stack.s.api_url}/v1/feedback/sns", "seed": 3,
        "rates": [{"pattern": "*-hot@example.org", "complaint": 0.5}]}).json()
    assert answer["confirmed"] and answer["confirmation_answer"] == 200, answer
    yield answer
    httpx.post(f"{stack.s.ses_endpoint}/_local/events", json={"endpoint": None}, timeout=30)


def scheduled(api, emails: list[str], **extra) -> str:
    created = api.post("/v1/campaigns", json=campaign_body(seconds=2, **extra)).json()
    report = upload(api, created["id"], "email\n" + "".join(f"{e}\n" for e in emails))
    assert report["recipients"] == len(emails)
    assert api.post(f"/v1/campaigns/{created['id']}/schedule").json()["status"] == "scheduled"
    return str(created["id"])


def paused_metric(stack, tenant: str) -> float:
    """cronstream_reputation_paused_total{tenant, kind="complaint"} on the stack's worker."""
    pattern = re.compile(r'^cronstream_reputation_paused_total\{(?=[^}]*tenant="'
                         + re.escape(tenant) + r'")(?=[^}]*kind="complaint")[^}]*\} (\S+)$', re.M)
    total = 0.0
    for port in (stack.s.worker_metrics_port, stack.s.worker_metrics_port + 1):
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        except httpx.HTTPError:
            continue
        total += sum(float(v) for v in pattern.findall(text))
    return total


def test_a_complaining_tenant_is_paused_and_another_keeps_sending(stack, api, complaining):
    label, other = uuid.uuid4().hex[:8], make_client(stack)
    hot = [f"r{i}-{label}-hot@example.org" for i in range(1000)]
    calm = [f"r{i}-{label}-calm@example.org" for i in range(300)]
    # slow enough that the guard hears the first complaints long before the list is through
    first = scheduled(api, hot, max_rate_per_s=20)
    second = scheduled(other, calm)

    def status() -> dict:
        return dict(api.get(f"/v1/campaigns/{first}").json())

    paused = wait_for(lambda: (c := status())["status"] == "paused" and c, timeout_s=120,
                      every_s=1, explain=lambda: (
                          f"campaign {status()}; the stack's worker must run with the guard "
                          "settings of tests/conftest.py (a stack started otherwise and kept "
                          "with CRONSTREAM_KEEP_STACK has the defaults, 1000 sends per partition)"))
    assert re.search(r"complaint rate \d+\.\d+% \(\d+ of \d+ sends in the window\) is over "
                     r"20\.00%", paused["status_reason"]), paused["status_reason"]
    wait_for(lambda: paused_metric(stack, api.tenant) >= 1, timeout_s=30)

    # the other tenant's campaign sends to the end, untouched
    wait_for(lambda: len(outcomes(stack, second)) == len(calm), timeout_s=180, every_s=1)
    assert set(outcomes(stack, second).values()) == {"sent"}
    assert other.get(f"/v1/campaigns/{second}").json()["status_reason"] is None
    # and the paused one did not: its walkers wait while it is paused
    assert len(outcomes(stack, first)) < len(hot)

    # the operator resumes: the campaign is running again, its reason cleared
    resumed = api.post(f"/v1/campaigns/{first}/resume").json()
    assert (resumed["status"], resumed["status_reason"]) == ("scheduled", None)
    assert api.post(f"/v1/campaigns/{first}/cancel").json()["status"] == "cancelled"
    other.close()
