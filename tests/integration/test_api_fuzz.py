"""Property-based fuzzing of every operation of the OpenAPI document (schemathesis): whatever a
client sends — bodies, paths, query strings generated from the schema and around it — the API
answers with a 2xx/4xx, never a 5xx, and a request it rejects writes nothing (no partial
writes): the topics only the API writes to do not grow across a 4xx."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from api.app import create_app
from streams.runtime.admin import end_offsets
from streams.topology import CAMPAIGNS, JOB_COMMANDS, JOBS, RECIPIENTS, SES_FEEDBACK, SUPPRESSIONS
from tests.conftest import make_client

schema = schemathesis.openapi.from_dict(create_app().openapi())


@pytest.fixture(scope="module")
def fuzz_auth(stack) -> dict[str, str]:
    """A tenant whose request rate the fuzzer cannot exhaust (429s would hide real answers)."""
    with make_client(stack, requests_per_s=100_000) as client:
        return {"Authorization": client.headers["Authorization"]}


# every topic the API (and only the API) produces to: a rejected request must leave them alone
# (the SES feedback topic too: a forged or unsigned SNS message is a 4xx that writes nothing)
API_WRITTEN = [(t.name, p)
               for t in (JOBS, JOB_COMMANDS, CAMPAIGNS, RECIPIENTS, SUPPRESSIONS, SES_FEEDBACK)
               for p in range(t.partitions)]


def records_written(stack) -> int:
    return sum(end_offsets(stack.s.bootstrap, API_WRITTEN).values())


@schema.parametrize()
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_makes_the_api_fail_or_half_write(case, stack, fuzz_auth):
    before = records_written(stack)
    response = case.call(base_url=stack.s.api_url, headers=fuzz_auth, timeout=30)
    assert response.status_code < 500, (case.method, case.formatted_path, response.text[:500])
    if 400 <= response.status_code < 500:
        assert records_written(stack) == before, (
            "a rejected request wrote records", case.method, case.formatted_path,
            response.status_code, response.text[:300])


def test_fuzzing_covers_every_operation():
    operations = {(op.method.upper(), op.path) for op in
                  (result.ok() for result in schema.get_all_operations())}
    assert len(operations) >= 25 and ("PUT", "/v1/campaigns/{campaign_id}/recipients") in operations
    assert ("POST", "/v1/feedback/sns") in operations
