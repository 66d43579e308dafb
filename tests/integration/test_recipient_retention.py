"""No recipient lost to retention (issue 47, item 5), on the suite's stack: cronstream.recipients
is kept until pruned, a campaign beyond the old 7-day retention is accepted, and a cluster whose
topic still has a finite retention gets a refusal with the reason, not a list it would delete
before the send. That such a far campaign's recipients survive a prune and are then all sent is
``tests/integration/test_zw_deploy_two_hosts.py`` (a stack of its own: pruning the suite's
stack would judge other tests' campaigns)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from stack import isolated
from streams.topology import DAY_MS, RECIPIENTS
from tests.integration.test_campaigns import campaign_body, csv_lines, upload


def body_sending_in(days: float) -> dict:
    at = datetime.now(UTC) + timedelta(days=days)
    return {**campaign_body(), "send_at": at.isoformat()}


def retention(stack) -> int:
    return int(isolated.call("streams.runtime.admin:topic_config", stack.s.bootstrap,
                             RECIPIENTS.name, "retention.ms", timeout_s=60))


@pytest.fixture
def week_retention(stack) -> Iterator[None]:
    """The topic as an older version made it (7 days), restored to the topology's afterwards."""
    isolated.call("streams.runtime.admin:set_topic_config", stack.s.bootstrap, RECIPIENTS.name,
                  "retention.ms", str(7 * DAY_MS), timeout_s=60)
    try:
        yield
    finally:
        assert isolated.call("streams.runtime.admin:align_retention", stack.s.bootstrap,
                             timeout_s=60) == [f"{RECIPIENTS.name}: retention.ms "
                                               f"{7 * DAY_MS} -> -1"]


def test_the_recipients_topic_is_kept_until_pruned_and_a_far_send_is_accepted(stack, api):
    assert retention(stack) == -1
    created = api.post("/v1/campaigns", json=body_sending_in(10))  # past the old 7 days
    assert created.status_code == 201, created.text
    assert upload(api, created.json()["id"], csv_lines(5))["recipients"] == 5
    scheduled = api.post(f"/v1/campaigns/{created.json()['id']}/schedule")
    assert scheduled.status_code == 200 and scheduled.json()["status"] == "scheduled"
    assert api.post(f"/v1/campaigns/{created.json()['id']}/cancel").status_code == 200


def test_a_finite_retention_refuses_what_it_would_delete_before_the_send(stack, api,
                                                                         week_retention):
    ready = api.post("/v1/campaigns", json=body_sending_in(5)).json()  # kept: 5 days + 1 h
    assert upload(api, ready["id"], csv_lines(3))["recipients"] == 3
    refused_id = f"far-{uuid.uuid4().hex[:8]}"
    refused = api.post("/v1/campaigns", json={**body_sending_in(8), "id": refused_id})
    assert refused.status_code == 422, refused.text
    (problem,) = refused.json()["detail"]
    assert problem["loc"] == ["body", "send_at"] and problem["type"] == "not_kept"
    assert "retention.ms=604800000" in problem["msg"] and "set its retention.ms to -1" in problem["msg"]
    assert api.post(f"/v1/campaigns/{ready['id']}/schedule").status_code == 200
    assert api.get(f"/v1/campaigns/{refused_id}").status_code == 404  # nothing written
    assert api.post(f"/v1/campaigns/{ready['id']}/cancel").status_code == 200
