"""``GET /v1/jobs`` at any size: by state, soonest next run first, by name prefix, by label and
state together, with the tenant's counts per state on every page (``api.job_store``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from streams.runtime import clock
from tests.unit.api.conftest import JOB, Api
from tests.unit.api.test_validation import detail_naming


def _at(minutes: float) -> str:
    return (datetime.now(UTC) + timedelta(minutes=minutes)).isoformat()


def _ids(page: dict) -> list[str]:
    return [j["id"] for j in page["items"]]


def _setup(api: Api) -> dict[str, str]:
    auth = api.tenant("acme")
    jobs = {"in-9": {"schedule": {"at": _at(9)}}, "in-3": {"schedule": {"at": _at(3)}},
            "in-6": {"schedule": {"at": _at(6)}, "paused": True, "name": "nightly export"},
            "yearly": {"name": "nightly report"},  # JOB's schedule: 1 January
            "in-1": {"schedule": {"at": _at(1)}, "labels": {"team": "ops"}},
            "in-2": {"schedule": {"at": _at(2)}, "labels": {"team": "ops"}, "paused": True}}
    for job_id, changes in jobs.items():
        created = api.client.post("/v1/jobs", json={**JOB, "id": job_id, **changes}, headers=auth)
        assert created.status_code == 201, created.text
    api.client.post("/v1/jobs", json={**JOB, "id": "theirs"}, headers=api.tenant("other"))
    return auth


def test_active_jobs_are_listed_soonest_first_with_counts_per_state(api: Api):
    auth = _setup(api)
    page = api.client.get("/v1/jobs", params={"state": "active"}, headers=auth).json()
    assert _ids(page) == ["in-1", "in-3", "in-9", "yearly"]
    assert all(j["state"] == "active" for j in page["items"])
    assert page["counts"] == {"active": 4, "paused": 2, "completed": 0}
    paused = api.client.get("/v1/jobs", params={"state": "paused"}, headers=auth).json()
    assert _ids(paused) == ["in-2", "in-6"]


def test_pages_by_state_go_on_from_their_cursor(api: Api):
    auth = _setup(api)
    seen, cursor = [], None
    while True:
        params = {"state": "active", "limit": 3, **({"cursor": cursor} if cursor else {})}
        page = api.client.get("/v1/jobs", params=params, headers=auth).json()
        seen += _ids(page)
        if (cursor := page["next_cursor"]) is None:
            break
    assert seen == ["in-1", "in-3", "in-9", "yearly"]


def test_one_offs_past_their_time_move_to_completed(api: Api, monkeypatch):
    auth = _setup(api)
    later = clock.now_ms() + 4 * 60_000  # in-1, in-2 (paused) and in-3 have passed
    monkeypatch.setattr(clock, "now_ms", lambda: later)
    done = api.client.get("/v1/jobs", params={"state": "completed"}, headers=auth).json()
    assert _ids(done) == ["in-1", "in-2", "in-3"]
    assert done["counts"] == {"active": 2, "paused": 1, "completed": 3}
    assert _ids(api.client.get("/v1/jobs", params={"state": "active"}, headers=auth).json()) \
        == ["in-9", "yearly"]


def test_names_are_found_by_prefix_and_combine_with_a_state(api: Api):
    auth = _setup(api)
    named = api.client.get("/v1/jobs", params={"name": "nightly"}, headers=auth).json()
    assert _ids(named) == ["in-6", "yearly"]  # name order: export, report
    active = api.client.get("/v1/jobs", params={"name": "nightly", "state": "active"},
                            headers=auth).json()
    assert _ids(active) == ["yearly"]


def test_a_label_combines_with_a_state(api: Api):
    auth = _setup(api)
    page = api.client.get("/v1/jobs", params={"label": "team:ops", "state": "paused"},
                          headers=auth).json()
    assert _ids(page) == ["in-2"]


def test_another_lists_cursor_or_an_unknown_state_is_a_422_naming_it(api: Api):
    auth = _setup(api)
    by_id = api.client.get("/v1/jobs", params={"limit": 1}, headers=auth).json()
    bad = api.client.get("/v1/jobs", params={"state": "active", "cursor": by_id["next_cursor"]},
                         headers=auth)
    detail_naming(bad, ["query", "cursor"], "not a next_cursor")
    unknown = api.client.get("/v1/jobs", params={"state": "running"}, headers=auth)
    assert unknown.status_code == 422 and "state" in unknown.text


def test_an_empty_name_is_no_filter_and_a_long_one_a_422_naming_it(api: Api):
    """``name=`` sent empty (an unset field, formatted) lists as if absent; it was a 500 once,
    the length check running after the empty value had become None (found by the fuzzer)."""
    auth = _setup(api)
    page = api.client.get("/v1/jobs?name=&limit=2", headers=auth)
    assert page.status_code == 200, page.text
    assert page.json()["items"] == api.client.get("/v1/jobs?limit=2", headers=auth).json()["items"]
    long = api.client.get("/v1/jobs", params={"name": "x" * 201}, headers=auth)
    detail_naming(long, ["query", "name"], "at most 200 characters")
