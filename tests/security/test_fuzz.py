"""A bounded fuzzing pass over every operation of the OpenAPI document (schemathesis, issue 40
item 3): whatever a client sends — bodies, paths, query strings generated from the schema and
around it, a third of them aimed at another tenant's job, campaign and address — the API
answers with a 2xx/4xx, never a 5xx; a request it rejects writes nothing (the topics only the
API writes to do not grow across a 4xx); a create it accepts is there to be read back at once
(nothing accepted and then lost); and the other tenant's records are untouched, judged from the
topics themselves.

Bounded: ``MAX_EXAMPLES`` cases per operation (about 30 operations), no deadline per case."""

from __future__ import annotations

import itertools
import uuid

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from api.app import create_app
from stack import isolated
from streams.runtime.admin import end_offsets
from streams.topology import (
    CAMPAIGNS,
    JOB_COMMANDS,
    JOBS,
    RECIPIENTS,
    SES_FEEDBACK,
    SUPPRESSIONS,
    partition_for,
)
from tests.conftest import cluster_partitions, make_client
from tests.integration.test_campaigns import campaign_body

MAX_EXAMPLES = 20
schema = schemathesis.openapi.from_dict(create_app().openapi())
aimed = itertools.count()


@pytest.fixture(scope="module")
def fuzz_auth(stack) -> dict[str, str]:
    """A tenant whose request rate the fuzzer cannot exhaust (429s would hide real answers)."""
    with make_client(stack, requests_per_s=100_000) as client:
        return {"Authorization": client.headers["Authorization"]}


@pytest.fixture(scope="module")
def victim(stack) -> dict:
    """Another tenant's job, campaign and suppression, and where their topics ended before the
    fuzzing began."""
    with make_client(stack) as other:
        job = other.post("/v1/jobs", json={"schedule": {"cron": "0 0 1 1 *"}, "target": {
            "type": "webhook", "url": "http://127.0.0.1:9/hook"}}).json()
        campaign = other.post("/v1/campaigns", json=campaign_body(seconds=3600)).json()
        email = f"victim-{uuid.uuid4().hex[:8]}@example.org"
        assert other.post("/v1/suppressions", json={"email": email}).status_code == 201
        # the job and campaign ids are generated: stored as they are, keyed by them
        keys = {JOBS.name: job["id"], CAMPAIGNS.name: campaign["id"],
                SUPPRESSIONS.name: f"{other.tenant}:{email}"}
        starts = {topic: end_offsets(stack.s.bootstrap, [(topic, partition_for(key, cluster_partitions()))])
                  [(topic, partition_for(key, cluster_partitions()))] for topic, key in keys.items()}
        seen = {"job": other.get(f"/v1/jobs/{job['id']}").json(),
                "campaign": other.get(f"/v1/campaigns/{campaign['id']}").json()}
        yield {"tenant": other.tenant, "auth": dict(other.headers), "job_id": job["id"],
               "campaign_id": campaign["id"], "email": email, "keys": keys, "starts": starts,
               "seen": seen}


# every topic the API (and only the API) produces to: a rejected request must leave them alone
# (the SES feedback topic too: a forged or unsigned SNS message is a 4xx that writes nothing)
API_WRITTEN = [(t.name, p)
               for t in (JOBS, JOB_COMMANDS, CAMPAIGNS, RECIPIENTS, SUPPRESSIONS, SES_FEEDBACK)
               for p in range(t.count(cluster_partitions()))]


def records_written(stack) -> int:
    return sum(end_offsets(stack.s.bootstrap, API_WRITTEN).values())


def aim(case, victim: dict) -> None:
    """Every third case with a path parameter names the other tenant's resource instead."""
    if not case.path_parameters or next(aimed) % 3:
        return
    theirs = {"job_id": victim["job_id"], "campaign_id": victim["campaign_id"],
              "email": victim["email"]}
    for name in case.path_parameters:
        if name in theirs:
            case.path_parameters[name] = theirs[name]


def read_back(case, response, base_url: str, auth: dict[str, str]) -> None:
    """An accepted create or change is readable at once: nothing accepted and then lost."""
    import httpx

    if not 200 <= response.status_code < 300:
        return
    # schemathesis's headers are lists of values (lowercase keys): joined, or "json" was never
    # found in them and nothing was ever read back
    kind = response.headers.get("content-type") or ""
    body = response.json() if "json" in (",".join(kind) if isinstance(kind, list) else kind) \
        else {}
    follow: list[str] = []
    if case.method == "POST" and case.path in ("/v1/jobs", "/v1/campaigns"):
        follow.append(f"{case.path}/{body['id']}")
    elif case.method == "PUT" and case.path == "/v1/jobs/{job_id}":
        follow.append(f"/v1/jobs/{body['id']}")
    elif case.method == "POST" and case.path == "/v1/suppressions":
        follow.append(f"/v1/suppressions/{body['email']}")
    elif case.method == "POST" and case.path == "/v1/job-imports":
        follow += [f"/v1/jobs/{job_id}" for job_id in body["created"]]
    for path in follow:
        found = httpx.get(f"{base_url}{path}", headers=auth, timeout=30)
        assert found.status_code == 200, ("accepted, then not found", case.method, case.path,
                                          path, found.text[:300])


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_makes_the_api_fail_or_half_write_or_lose(case, stack, fuzz_auth, victim):
    aim(case, victim)
    before = records_written(stack)
    response = case.call(base_url=stack.s.api_url, headers=fuzz_auth, timeout=30)
    assert response.status_code < 500, (case.method, case.formatted_path, response.text[:500])
    if 400 <= response.status_code < 500:
        assert records_written(stack) == before, (
            "a rejected request wrote records", case.method, case.formatted_path,
            response.status_code, response.text[:300])
    read_back(case, response, stack.s.api_url, fuzz_auth)


def test_the_fuzzing_changed_no_other_tenants_records(stack, victim):
    """After the pass (this runs after it): no record under the other tenant's keys was written
    to its job's, campaign's or suppression's partition, and the tenant reads them unchanged."""
    import httpx

    for topic, key in victim["keys"].items():
        written = isolated.call("tests.security.kafka_tools:keys_from", stack.s.bootstrap, topic,
                                partition_for(key, cluster_partitions()), victim["starts"][topic],
                                timeout_s=120)
        assert key not in written, f"{topic} got a record for the other tenant's {key}"
    auth = victim["auth"]
    job = httpx.get(f"{stack.s.api_url}/v1/jobs/{victim['job_id']}", headers=auth,
                    timeout=30).json()
    kept = ("revision", "paused", "updated_at", "schedule", "target")
    assert {k: job.get(k) for k in kept} == {k: victim["seen"]["job"].get(k) for k in kept}
    campaign = httpx.get(f"{stack.s.api_url}/v1/campaigns/{victim['campaign_id']}",
                         headers=auth, timeout=30).json()
    assert (campaign["status"], campaign["updated_at"]) == (
        victim["seen"]["campaign"]["status"], victim["seen"]["campaign"]["updated_at"])
    assert httpx.get(f"{stack.s.api_url}/v1/suppressions/{victim['email']}", headers=auth,
                     timeout=30).status_code == 200


def test_fuzzing_covers_every_operation():
    operations = {(op.method.upper(), op.path) for op in
                  (result.ok() for result in schema.get_all_operations())}
    assert len(operations) >= 25 and ("PUT", "/v1/campaigns/{campaign_id}/recipients") in operations
    assert ("POST", "/v1/feedback/sns") in operations
