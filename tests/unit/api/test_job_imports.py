"""``POST /v1/job-imports`` in-process: all or nothing, each refusal naming the job and field."""

from __future__ import annotations

from api.models import MAX_IMPORT
from streams.runtime.codec import codec
from tests.unit.api.conftest import JOB, Api


def test_an_import_writes_every_job_to_the_import_topic_and_they_read_back(api: Api):
    acme = api.tenant("acme")
    response = api.client.post("/v1/job-imports", json={"jobs": [JOB] * 3}, headers=acme)
    assert response.status_code == 202, response.text
    created = response.json()["created"]
    assert len(set(created)) == 3
    assert [(topic, key) for topic, key, _ in api.emitter.sent] == \
        [("cronstream.job-imports", job_id) for job_id in created]
    assert all(codec().decode(value)["tenant"] == "acme" for _, _, value in api.emitter.sent)
    assert api.client.get(f"/v1/jobs/{created[0]}", headers=acme).status_code == 200


def test_a_delete_import_writes_tombstones_for_the_tenants_own_jobs(api: Api):
    acme = api.tenant("acme")
    created = api.client.post("/v1/job-imports", json={"jobs": [JOB] * 2},
                              headers=acme).json()["created"]
    response = api.client.post("/v1/job-imports", json={"delete": created}, headers=acme)
    assert response.status_code == 202, response.text
    assert api.emitter.sent[-2:] == [("cronstream.job-imports", job_id, None) for job_id in created]
    assert api.client.get(f"/v1/jobs/{created[0]}", headers=acme).status_code == 404


def test_one_bad_job_refuses_the_whole_import_naming_it(api: Api):
    acme = api.tenant("acme")
    bad = {**JOB, "schedule": {"cron": "61 * * * *"}}
    response = api.client.post("/v1/job-imports", json={"jobs": [JOB, JOB, bad]}, headers=acme)
    assert response.status_code == 422, response.text
    locs = [d["loc"] for d in response.json()["detail"]]
    assert any(loc[:3] == ["body", "jobs", 2] for loc in locs), locs
    assert api.emitter.sent == []


def test_a_job_the_workers_would_refuse_is_named_by_its_index(api: Api):
    acme = api.tenant("acme", allowed_targets=[])
    internal = {**JOB, "target": {"type": "webhook", "url": "http://127.0.0.1:9/hook"}}
    response = api.client.post("/v1/job-imports", json={"jobs": [internal]}, headers=acme)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", "jobs", 0, "target", "url"]
    assert api.emitter.sent == []


def test_deleting_another_tenants_job_is_refused_and_nothing_is_deleted(api: Api):
    owner, other = api.tenant("owner"), api.tenant("other")
    theirs = api.client.post("/v1/jobs", json=JOB, headers=owner).json()["id"]
    written = list(api.emitter.sent)
    response = api.client.post("/v1/job-imports", json={"delete": [theirs]}, headers=other)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", "delete", "0"]
    assert api.emitter.sent == written


def test_empty_oversized_and_over_quota_imports_are_refused(api: Api):
    acme = api.tenant("acme", max_jobs=2)
    assert api.client.post("/v1/job-imports", json={}, headers=acme).status_code == 422
    too_many = {"delete": [f"id-{i}" for i in range(MAX_IMPORT + 1)]}
    assert api.client.post("/v1/job-imports", json=too_many, headers=acme).status_code == 422
    over = api.client.post("/v1/job-imports", json={"jobs": [JOB] * 3}, headers=acme)
    assert over.status_code == 403 and "quota" in over.text
    assert api.emitter.sent == []
