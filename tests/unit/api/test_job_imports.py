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


def test_an_import_the_topic_refuses_leaves_the_store_as_it_was(api: Api, monkeypatch):
    """The store takes an import before the topic (so the view finds its copies held), and
    gives it back when the broker refuses it: no job readable that was never written, none
    deleted that still is."""
    acme = api.tenant("acme")
    kept = api.client.post("/v1/job-imports", json={"jobs": [JOB]}, headers=acme).json()["created"]
    count = api.client.get("/v1/jobs", headers=acme).json()["counts"]

    async def refused(*args, **kwargs):
        raise RuntimeError("the broker is gone")
    monkeypatch.setattr(api.emitter, "acked", refused)
    client = api.client.__class__(api.client.app, raise_server_exceptions=False)
    response = client.post("/v1/job-imports", json={"jobs": [JOB] * 3, "delete": kept},
                           headers=acme)
    assert response.status_code == 500
    assert api.client.get(f"/v1/jobs/{kept[0]}", headers=acme).status_code == 200
    assert api.client.get("/v1/jobs", headers=acme).json()["counts"] == count


def ndjson(*docs) -> bytes:
    import json
    return "".join(json.dumps(doc) + "\n" for doc in docs).encode()


STREAM = {"Content-Type": "application/x-ndjson"}


def test_a_streamed_import_writes_every_line_and_answers_the_counts(api: Api):
    acme = api.tenant("acme")
    old = api.client.post("/v1/jobs", json=JOB, headers=acme).json()["id"]
    body = ndjson(*[{**JOB, "name": f"job {i}"} for i in range(2500)], {"delete": old})
    response = api.client.post("/v1/job-imports/stream", content=body,
                               headers={**acme, **STREAM})
    assert response.status_code == 202, response.text
    answer = response.json()
    assert (answer["lines"], answer["created"], answer["deleted"]) == (2501, 2500, 1)
    imported = [(key, value) for topic, key, value in api.emitter.sent
                if topic == "cronstream.job-imports"]
    assert [key for key, _ in imported[:2500]] == answer["ids"]
    assert [codec().decode(value)["name"] for _, value in imported[:2500]] == \
        [f"job {i}" for i in range(2500)], "in the lines' order"
    assert imported[2500] == (old, None)
    assert api.client.get(f"/v1/jobs/{answer['ids'][-1]}", headers=acme).status_code == 200


def test_every_bad_line_of_a_stream_is_named_and_nothing_is_written(api: Api):
    acme = api.tenant("acme", allowed_targets=[])
    lines = [JOB if i not in (3, 1500) else None for i in range(2000)]
    lines[3] = {**JOB, "schedule": {"cron": "61 * * * *"}}
    lines[1500] = {**JOB, "misfire": {"policy": "sometimes"}}
    body = ndjson(*lines) + b"{oops\n" + ndjson({"delete": "no-such-job"})
    response = api.client.post("/v1/job-imports/stream", content=body,
                               headers={**acme, **STREAM})
    assert response.status_code == 422, response.text
    locs = [d["loc"][:4] for d in response.json()["detail"]]
    assert ["body", "line", 4, "schedule"] in locs  # lines count from 1
    assert ["body", "line", 1501, "misfire"] in locs
    assert ["body", "line", 2001] in [loc[:3] for loc in locs]
    assert ["body", "line", 2002, "delete"] in locs
    # this tenant may call no webhook at all: every job's URL is refused, each on its line
    assert ["body", "line", 1, "target"] in locs
    assert api.emitter.sent == []


def test_a_csv_stream_nests_its_columns_and_reads_numbers_from_text(api: Api):
    acme = api.tenant("acme")
    body = (b"name,schedule.cron,target.type,target.url,misfire.max_lateness_s,labels.team\n"
            b"first,0 0 1 1 *,webhook,http://127.0.0.1:9/hook,120,billing\n"
            b"second,0 0 1 1 *,webhook,http://127.0.0.1:9/hook,,\n")
    response = api.client.post("/v1/job-imports/stream", content=body,
                               headers={**acme, "Content-Type": "text/csv"})
    assert response.status_code == 202, response.text
    first = codec().decode(api.emitter.sent[0][2])
    assert (first["name"], first["max_lateness_s"], first["labels"]) == ("first", 120,
                                                                         {"team": "billing"})


def test_a_stream_past_the_quota_or_of_another_type_is_refused_and_writes_nothing(api: Api):
    acme = api.tenant("acme", max_jobs=1500)
    over = api.client.post("/v1/job-imports/stream", content=ndjson(*[JOB] * 2000),
                           headers={**acme, **STREAM})
    assert over.status_code == 403 and "quota" in over.text
    other = api.client.post("/v1/job-imports/stream", content=b"{}", headers={
        **acme, "Content-Type": "application/json"})
    assert other.status_code == 415 and "content-type" in other.text
    assert api.emitter.sent == []


def test_a_label_deletes_every_job_of_the_tenant_that_carries_it(api: Api):
    acme, other = api.tenant("acme"), api.tenant("other")
    billing = {**JOB, "labels": {"team": "billing"}}
    mine = api.client.post("/v1/job-imports/stream", content=ndjson(*[billing] * 1200, JOB),
                           headers={**acme, **STREAM}).json()["ids"]
    theirs = api.client.post("/v1/jobs", json=billing, headers=other).json()["id"]
    response = api.client.post("/v1/job-imports", json={"delete_label": "team:billing",
                                                         "delete": [mine[0]]}, headers=acme)
    assert response.status_code == 202, response.text
    assert response.json()["deleted_by_label"] == 1200
    tombstones = [key for topic, key, value in api.emitter.sent
                  if topic == "cronstream.job-imports" and value is None]
    assert sorted(tombstones) == sorted(mine[:1200]), "each once, the named one too"
    assert api.client.get(f"/v1/jobs/{mine[1200]}", headers=acme).status_code == 200
    assert api.client.get(f"/v1/jobs/{theirs}", headers=other).status_code == 200
    bad = api.client.post("/v1/job-imports", json={"delete_label": "bad label!"}, headers=acme)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "delete_label"]


def test_a_stream_refuses_no_key_another_tenants_id_and_an_overlong_line_writing_nothing(api: Api):
    owner, other = api.tenant("owner"), api.tenant("other")
    theirs = api.client.post("/v1/jobs", json=JOB, headers=owner).json()["id"]
    written = list(api.emitter.sent)
    anonymous = api.client.post("/v1/job-imports/stream", content=ndjson(JOB), headers=STREAM)
    assert anonymous.status_code == 401
    body = ndjson(JOB, {"delete": theirs}) + b'{"name": "' + b"x" * 20_000 + b'"}\n'
    refused = api.client.post("/v1/job-imports/stream", content=body, headers={**other, **STREAM})
    assert refused.status_code == 422, refused.text
    locs = [d["loc"][:4] for d in refused.json()["detail"]]
    assert ["body", "line", 2, "delete"] in locs and ["body", "line", 3] in locs
    assert api.emitter.sent == written
    assert api.client.get(f"/v1/jobs/{theirs}", headers=owner).status_code == 200
