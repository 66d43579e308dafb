"""Property-based fuzzing of every operation of the OpenAPI document (schemathesis): whatever a
client sends — bodies, paths, query strings generated from the schema and around it — the API
answers with a 2xx/4xx, never a 5xx."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from api.app import create_app
from tests.conftest import make_client

schema = schemathesis.openapi.from_dict(create_app().openapi())


@pytest.fixture(scope="module")
def fuzz_auth(stack) -> dict[str, str]:
    """A tenant whose request rate the fuzzer cannot exhaust (429s would hide real answers)."""
    with make_client(stack, requests_per_s=100_000) as client:
        return {"Authorization": client.headers["Authorization"]}


@schema.parametrize()
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_makes_the_api_fail(case, stack, fuzz_auth):
    response = case.call(base_url=stack.s.api_url, headers=fuzz_auth, timeout=30)
    assert response.status_code < 500, (case.method, case.formatted_path, response.text[:500])


def test_fuzzing_covers_every_operation():
    operations = {(op.method.upper(), op.path) for op in
                  (result.ok() for result in schema.get_all_operations())}
    assert len(operations) >= 25 and ("PUT", "/v1/campaigns/{campaign_id}/recipients") in operations
