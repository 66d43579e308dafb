"""The job contract on the real stack: a client-chosen id (409 on reuse, per tenant), labels and
their filter, a one-off that becomes ``completed`` once its slot has been decided, and
``delete_after_completion`` removing the job through a tombstone on the jobs topic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cli.demo import Receiver
from tests.conftest import free_port, make_client
from tests.integration.helpers import ledger
from tests.waiting import wait_for


def webhook(port: int) -> dict:
    return {"type": "webhook", "url": f"http://127.0.0.1:{port}/hook"}


def at_in(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def test_a_client_id_is_the_jobs_id_and_a_second_create_with_it_is_a_409(api):
    body = {"id": "nightly-report", "schedule": {"cron": "0 0 1 1 *"}, "target": webhook(9),
            "name": "Nightly report", "labels": {"team": "billing"}}
    created = api.post("/v1/jobs", json=body)
    assert created.status_code == 201, created.text
    assert created.json()["id"] == "nightly-report" and created.json()["state"] == "active"
    assert api.post("/v1/jobs", json=body).status_code == 200  # a retried create
    taken = api.post("/v1/jobs", json={**body, "name": "another"})
    assert taken.status_code == 409
    assert taken.json()["detail"][0]["loc"] == ["body", "id"]
    assert api.get("/v1/jobs/nightly-report").json()["name"] == "Nightly report"


def test_client_ids_are_per_tenant(stack, api):
    body = {"id": "shared-name", "schedule": {"cron": "0 0 1 1 *"}, "target": webhook(9)}
    assert api.post("/v1/jobs", json={**body, "name": "mine"}).status_code == 201
    with make_client(stack) as other:
        assert other.get("/v1/jobs/shared-name").status_code == 404
        theirs = other.post("/v1/jobs", json={**body, "name": "theirs"})
        assert theirs.status_code == 201, "no 409: that would reveal the other tenant's job"
        assert other.delete("/v1/jobs/shared-name").status_code == 204
    assert api.get("/v1/jobs/shared-name").json()["name"] == "mine"


def test_labels_filter_the_list(api):
    for name, labels in (("a", {"team": "billing", "env": "prod"}),
                         ("b", {"team": "billing", "env": "dev"}), ("c", {"team": "ops"})):
        api.post("/v1/jobs", json={"id": name, "schedule": {"cron": "0 0 1 1 *"},
                                   "target": webhook(9), "labels": labels})

    def listed(*labels: str) -> list[str]:
        return [j["id"] for j in api.get("/v1/jobs", params={"label": list(labels)}).json()["items"]]

    assert listed("team:billing") == ["a", "b"]
    assert listed("team:billing", "env:prod") == ["a"]
    assert listed("env") == ["a", "b"]


def test_a_one_off_completes_after_its_slot_and_delete_after_completion_removes_it(stack, api):
    port = free_port()
    with Receiver(port, quiet=True) as receiver:
        kept = api.post("/v1/jobs", json={"id": "kept", "schedule": {"at": at_in(2)},
                                          "target": webhook(port)}).json()
        doomed = api.post("/v1/jobs", json={"id": "doomed", "schedule": {"at": at_in(2)},
                                            "target": webhook(port),
                                            "delete_after_completion": True}).json()
        assert kept["state"] == doomed["state"] == "active"
        stored = {job_id: f"{api.tenant}/{job_id}" for job_id in ("kept", "doomed")}
        # both slots decided and run, recorded on the ledger under the tenant-qualified id
        for job_id in stored.values():
            wait_for(lambda job_id=job_id: [r for r in ledger(stack, job_id=job_id)
                                            if r["outcome"] == "succeeded"], timeout_s=60)
        assert len(receiver.fires) == 2
    assert api.get("/v1/jobs/kept").json()["state"] == "completed"
    assert api.get("/v1/jobs/kept/next").json()["next"] == []
    wait_for(lambda: api.get("/v1/jobs/doomed").status_code == 404, timeout_s=60)
    assert [j["id"] for j in api.get("/v1/jobs").json()["items"]] == ["kept"]
    assert ledger(stack, job_id=stored["doomed"]), "its history stays"
