"""The job contract in-process (``create_app`` on an ``ApiState`` with no broker): a client-chosen
id, unique within its tenant and never revealing another tenant's; name, description and labels
with their limits; the label filter of the list; the derived state of reads and lists."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from api.models import MAX_LABEL_VALUE, MAX_LABELS
from streams.runtime import clock
from streams.runtime.codec import codec
from streams.topology import JOBS
from tests.unit.api.conftest import JOB, Api
from tests.unit.api.test_validation import detail_naming


def job(**changes) -> dict:
    return {**JOB, **changes}


def written_keys(api: Api) -> list[str]:
    return [key for topic, key, _ in api.emitter.sent if topic == JOBS.name]


def test_a_client_id_names_the_job_in_every_path_and_is_stored_under_its_tenant(api: Api):
    auth = api.tenant("acme")
    created = api.client.post("/v1/jobs", json=job(id="nightly-report"), headers=auth)
    assert created.status_code == 201, created.text
    assert created.json()["id"] == "nightly-report"
    assert created.headers["Location"] == "/v1/jobs/nightly-report"
    # the topic's key (and the ledger's job_id, fire ids) is tenant-qualified
    assert written_keys(api) == ["acme/nightly-report"]
    assert api.client.get("/v1/jobs/nightly-report", headers=auth).json()["id"] == "nightly-report"
    paused = api.client.post("/v1/jobs/nightly-report/pause", headers=auth)
    assert paused.json()["state"] == "paused"
    trigger = api.client.post("/v1/jobs/nightly-report/trigger", headers=auth).json()
    assert trigger["fire_id"].startswith("acme/nightly-report@")
    assert api.client.get("/v1/jobs/nightly-report/next", headers=auth).json()["job_id"] == \
        "nightly-report"
    assert api.client.delete("/v1/jobs/nightly-report", headers=auth).status_code == 204
    assert api.emitter.sent[-1] == (JOBS.name, "acme/nightly-report", None)
    assert api.client.get("/v1/jobs/nightly-report", headers=auth).status_code == 404


def test_a_taken_id_is_a_409_naming_it_and_a_retried_create_is_a_replay(api: Api):
    auth = api.tenant("acme")
    first = api.client.post("/v1/jobs", json=job(id="report"), headers=auth)
    assert first.status_code == 201
    again = api.client.post("/v1/jobs", json=job(id="report"), headers=auth)
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["created_at"] == first.json()["created_at"]
    other = api.client.post("/v1/jobs", json=job(id="report", name="another"), headers=auth)
    assert other.status_code == 409
    detail_naming(other, ["body", "id"], "job id report is taken")
    assert written_keys(api) == ["acme/report"]


def test_a_generated_id_of_the_tenant_cannot_be_taken_as_a_client_id(api: Api):
    """Else one path would name two of the tenant's jobs."""
    auth = api.tenant("acme")
    generated = api.client.post("/v1/jobs", json=JOB, headers=auth).json()["id"]
    taken = api.client.post("/v1/jobs", json=job(id=generated, name="x"), headers=auth)
    assert taken.status_code == 409
    detail_naming(taken, ["body", "id"], "is taken")


def test_client_ids_are_per_tenant_and_never_reveal_another_tenants_job(api: Api):
    acme, globex = api.tenant("acme"), api.tenant("globex")
    assert api.client.post("/v1/jobs", json=job(id="daily", name="acme's"),
                           headers=acme).status_code == 201
    theirs = api.client.post("/v1/jobs", json=job(id="daily", name="globex's"), headers=globex)
    assert theirs.status_code == 201, "another tenant's id is no conflict (and no 409 leak)"
    assert api.client.get("/v1/jobs/daily", headers=acme).json()["name"] == "acme's"
    assert api.client.get("/v1/jobs/daily", headers=globex).json()["name"] == "globex's"
    assert written_keys(api) == ["acme/daily", "globex/daily"]
    # a generated id of one tenant is a 404 to another, and no conflict when chosen by it
    generated = api.client.post("/v1/jobs", json=JOB, headers=acme).json()["id"]
    assert api.client.get(f"/v1/jobs/{generated}", headers=globex).status_code == 404
    assert api.client.post("/v1/jobs", json=job(id=generated), headers=globex).status_code == 201
    assert api.client.get(f"/v1/jobs/{generated}", headers=acme).json()["tenant"] == "acme"


@pytest.mark.parametrize("bad", ["", "-starts-with-dash", "a/b", "a@b", "a:b", "has space",
                                 "x" * 65, "é"])
def test_a_bad_client_id_is_a_422_naming_id(api: Api, bad):
    auth = api.tenant("acme")
    response = api.client.post("/v1/jobs", json=job(id=bad), headers=auth)
    assert response.status_code == 422, response.text
    detail_naming(response, ["body", "id"], "should match pattern")
    assert api.emitter.sent == []


def test_an_id_is_not_part_of_a_replacement(api: Api):
    auth = api.tenant("acme")
    api.client.post("/v1/jobs", json=job(id="r"), headers=auth)
    response = api.client.put("/v1/jobs/r", json=job(id="other"), headers=auth)
    assert response.status_code == 422
    detail_naming(response, ["body", "id"], "Extra inputs are not permitted")


BAD_METADATA = [
    (job(name=""), ["body", "name"], "at least 1 character"),
    (job(name="n" * 201), ["body", "name"], "at most 200 characters"),
    (job(description="d" * 2001), ["body", "description"], "at most 2000 characters"),
    (job(labels={f"k{i}": "v" for i in range(MAX_LABELS + 1)}), ["body", "labels"],
     f"at most {MAX_LABELS} labels"),
    (job(labels={"team:x": "a"}), ["body", "labels"], "label key 'team:x' must be"),
    (job(labels={"": "a"}), ["body", "labels"], "label key '' must be"),
    (job(labels={"k" * 64: "a"}), ["body", "labels"], "must be 1-63 characters"),
    (job(labels={"team": "v" * (MAX_LABEL_VALUE + 1)}), ["body", "labels"],
     f"at most {MAX_LABEL_VALUE} characters"),
    (job(labels={"team": "a\nb"}), ["body", "labels"], "control characters"),
    (job(labels={"team": 1}), ["body", "labels", "team"], "valid string"),
]


@pytest.mark.parametrize(("body", "loc", "says"), BAD_METADATA,
                         ids=[f"{c[1][-1]} {i}" for i, c in enumerate(BAD_METADATA)])
def test_bad_metadata_is_a_422_naming_the_field(api: Api, body, loc, says):
    auth = api.tenant("acme")
    response = api.client.post("/v1/jobs", json=body, headers=auth)
    assert response.status_code == 422, response.text
    detail_naming(response, loc, says)


def test_name_description_and_labels_are_kept_changed_and_encoded(api: Api):
    auth = api.tenant("acme")
    body = job(name="Nightly report", description="mails the CFO",
               labels={"team": "billing", "env": "prod", "k8s.io/app": "x:y"})
    created = api.client.post("/v1/jobs", json=body, headers=auth).json()
    assert (created["name"], created["description"], created["labels"]) == (
        "Nightly report", "mails the CFO", body["labels"])
    assert created["delete_after_completion"] is False
    record = codec().decode(api.emitter.sent[-1][2])
    assert record["labels"] == body["labels"] and record["name"] == "Nightly report"
    changed = api.client.put(f"/v1/jobs/{created['id']}", json=job(labels={"team": "ops"}),
                             headers=auth).json()
    assert (changed["name"], changed["description"], changed["labels"]) == (
        None, None, {"team": "ops"})


def test_the_label_filter_is_an_and_of_key_value_or_key_filters(api: Api):
    acme, globex = api.tenant("acme"), api.tenant("globex")
    labels = {"a": {"team": "billing", "env": "prod"}, "b": {"team": "billing", "env": "dev"},
              "c": {"team": "ops", "env": "prod"}, "d": {}}
    for name, these in labels.items():
        api.client.post("/v1/jobs", json=job(id=name, labels=these), headers=acme)
    api.client.post("/v1/jobs", json=job(id="e", labels={"team": "billing"}), headers=globex)

    def listed(*filters: str, **params) -> list[str]:
        page = api.client.get("/v1/jobs", params={"label": list(filters), **params},
                              headers=acme)
        assert page.status_code == 200, page.text
        return [j["id"] for j in page.json()["items"]]

    assert listed() == ["a", "b", "c", "d"]
    assert listed("team:billing") == ["a", "b"]
    assert listed("team:billing", "env:prod") == ["a"]
    assert listed("env") == ["a", "b", "c"]
    assert listed("team:nobody") == []
    first = api.client.get("/v1/jobs", params={"label": "env", "limit": 2}, headers=acme).json()
    assert [j["id"] for j in first["items"]] == ["a", "b"] and first["next_cursor"]
    rest = api.client.get("/v1/jobs", params={"label": "env", "limit": 2,
                                              "cursor": first["next_cursor"]},
                          headers=acme).json()
    assert [j["id"] for j in rest["items"]] == ["c"] and rest["next_cursor"] is None
    bad = api.client.get("/v1/jobs", params={"label": "bad key:x"}, headers=acme)
    assert bad.status_code == 422
    detail_naming(bad, ["query", "label"], "expected key:value or key")


def test_a_rare_label_is_a_full_page_from_its_index(api: Api):
    """A label among many jobs is a range of the labels' index: the matching jobs in one page,
    in id order, whatever lies between them (it was a scan of 5,000 jobs a page, short pages
    and all, before the index)."""
    auth = api.tenant("acme")
    for i in range(12):
        labels = {"rare": "yes", "team": "ops"} if i in (3, 9) else {"team": "ops"}
        api.client.post("/v1/jobs", json=job(id=f"j{i:02}", labels=labels), headers=auth)
    page = api.client.get("/v1/jobs", params={"label": ["rare:yes", "team"], "limit": 2},
                          headers=auth).json()
    assert [j["id"] for j in page["items"]] == ["j03", "j09"]
    rest = api.client.get("/v1/jobs", params={"label": "rare", "cursor": page["next_cursor"]},
                          headers=auth).json()
    assert rest == {"items": [], "next_cursor": None, "counts": page["counts"]}


def iso(value: datetime) -> str:
    return value.isoformat()


def test_reads_and_lists_carry_the_derived_state(api: Api, monkeypatch):
    auth = api.tenant("acme")
    soon = datetime.now(UTC) + timedelta(minutes=5)
    api.client.post("/v1/jobs", json=job(id="once", schedule={"at": iso(soon)},
                                         delete_after_completion=True), headers=auth)
    api.client.post("/v1/jobs", json=job(id="held", paused=True), headers=auth)
    api.client.post("/v1/jobs", json=job(id="ending", schedule={
        "every_s": 60, "end": iso(soon + timedelta(minutes=1))}), headers=auth)

    def states() -> dict[str, str]:
        return {j["id"]: j["state"]
                for j in api.client.get("/v1/jobs", headers=auth).json()["items"]}

    assert states() == {"once": "active", "held": "paused", "ending": "active"}
    assert api.client.get("/v1/jobs/once", headers=auth).json()["delete_after_completion"]
    later = int((soon + timedelta(minutes=2)).timestamp() * 1000)
    monkeypatch.setattr(clock, "now_ms", lambda: later)
    assert states() == {"once": "completed", "held": "paused", "ending": "completed"}
    assert api.client.get("/v1/jobs/once", headers=auth).json()["state"] == "completed"


def run_cli(api: Api, auth: dict[str, str], *argv: str, capsys) -> str:
    """``cronstream jobs ...`` against the in-process API (its TestClient is an httpx client)."""
    import argparse

    from cli import resources
    from cli.client import Client

    parser = argparse.ArgumentParser()
    resources.add_parsers(parser.add_subparsers())
    args = parser.parse_args(list(argv))
    cli_client = Client.__new__(Client)
    cli_client.http = api.client
    api.client.headers.update(auth)
    original = resources.client
    resources.client = lambda _url, _key: cli_client  # type: ignore[assignment]
    try:
        assert args.func(args) == 0
    finally:
        resources.client = original  # type: ignore[assignment]
    return str(capsys.readouterr().out)


def test_the_cli_lists_by_label_and_up_to_its_limit(api: Api, capsys):
    auth = api.tenant("acme")
    for i in range(5):
        api.client.post("/v1/jobs", json=job(id=f"j{i}", name=f"job {i}",
                                             labels={"team": "billing" if i % 2 else "ops"}),
                        headers=auth)
    every = run_cli(api, auth, "jobs", "list", capsys=capsys).splitlines()
    assert [line.split()[0] for line in every] == ["j0", "j1", "j2", "j3", "j4"]
    assert "active" in every[0] and "'job 0'" in every[0] and "[team:ops]" in every[0]
    two = run_cli(api, auth, "jobs", "list", "--limit", "2", capsys=capsys).splitlines()
    assert [line.split()[0] for line in two] == ["j0", "j1"]
    billing = run_cli(api, auth, "jobs", "list", "--label", "team:billing", capsys=capsys)
    assert [line.split()[0] for line in billing.splitlines()] == ["j1", "j3"]
    one = run_cli(api, auth, "jobs", "list", "--label", "team:billing", "--label", "team",
                  "--limit", "1", capsys=capsys)
    assert [line.split()[0] for line in one.splitlines()] == ["j1"]


def test_the_cli_lists_by_state_soonest_first_and_by_name(api: Api, capsys):
    auth = api.tenant("acme")
    soon = datetime.now(UTC)
    for job_id, minutes, paused in (("later", 9, False), ("sooner", 2, False), ("held", 1, True)):
        api.client.post("/v1/jobs", json=job(id=job_id, name=f"{job_id} job", paused=paused,
                                             schedule={"at": iso(soon + timedelta(minutes=minutes))}),
                        headers=auth)
    active = run_cli(api, auth, "jobs", "list", "--state", "active", capsys=capsys)
    assert [line.split()[0] for line in active.splitlines()] == ["sooner", "later"]
    named = run_cli(api, auth, "jobs", "list", "--name", "hel", capsys=capsys)
    assert [line.split()[0] for line in named.splitlines()] == ["held"]


def test_the_cli_stops_a_list_by_next_run_where_it_comes_round_again(api: Api, capsys,
                                                                      monkeypatch):
    """Every-minute jobs listed by next run a job a page, the clock passing their next run
    before the third page: it starts over (every job sorts after the cursor again); the CLI
    stops there, each job listed once, instead of paging for ever."""
    auth = api.tenant("acme")
    for i in range(3):
        api.client.post("/v1/jobs", json=job(id=f"m{i}", schedule={"cron": "* * * * *"}),
                        headers=auth)
    pages = {"n": 0}
    original = api.client.request

    def request(method, url, **kwargs):
        pages["n"] += 1
        if pages["n"] == 3:  # a minute passes
            later = clock.now_ms() + 60_000
            monkeypatch.setattr(clock, "now_ms", lambda: later)
        kwargs["params"] = {**kwargs.get("params", {}), "limit": 1}
        return original(method, url, **kwargs)

    monkeypatch.setattr(api.client, "request", request)
    listed = run_cli(api, auth, "jobs", "list", "--state", "active", capsys=capsys)
    assert [line.split()[0] for line in listed.splitlines()] == ["m0", "m1"]
    assert pages["n"] == 3
