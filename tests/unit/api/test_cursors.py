"""Paged lists take ``?cursor=`` (empty, as many clients send for the first page) as no cursor."""

from __future__ import annotations

import uuid

from tests.unit.api.conftest import JOB, Api


def test_an_empty_cursor_lists_the_first_page_of_jobs(api: Api):
    auth = api.tenant("acme")
    ids = sorted(api.client.post("/v1/jobs", json=JOB, headers=auth).json()["id"] for _ in range(3))
    first = api.client.get("/v1/jobs?cursor=&limit=2", headers=auth)
    assert first.status_code == 200, first.text
    assert [j["id"] for j in first.json()["items"]] == ids[:2]
    rest = api.client.get("/v1/jobs", params={"cursor": first.json()["next_cursor"], "limit": 2},
                          headers=auth).json()
    assert [j["id"] for j in rest["items"]] == ids[2:] and rest["next_cursor"] is None


def test_an_empty_cursor_of_run_history_is_accepted(api: Api):
    """Answered before the ledger (in Postgres) is read: a job the tenant does not have is a
    404 once the empty cursor is let through, and was a 422 for the cursor before. The pages
    themselves are tests/integration/test_jobs_api.py's."""
    auth = api.tenant("acme")
    response = api.client.get(f"/v1/jobs/{uuid.uuid4()}/runs?cursor=", headers=auth)
    assert response.status_code == 404, response.text
