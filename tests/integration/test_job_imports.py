"""Bulk imports on the real stack: ``cronstream jobs import`` → ``POST /v1/job-imports/stream``
→ ``cronstream.job-imports`` → ``import_jobs`` → ``cronstream.jobs``: imported jobs go live and
run, an imported delete removes the job, a label deletes every job carrying it, and a bad line
refuses the whole import."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from cli.demo import Receiver
from streams.runtime.kafka_config import client_config
from tests.conftest import cluster_partitions, free_port
from tests.integration.test_cli import key_of
from tests.integration.test_operator import cli
from tests.waiting import wait_for


def test_imported_jobs_go_live_and_run_and_an_imported_delete_removes_one(stack, api, tmp_path):
    key = key_of(api)
    with Receiver(port := free_port(), quiet=True) as receiver:
        soon = (datetime.now(UTC) + timedelta(seconds=8)).isoformat()
        spec = tmp_path / "jobs.json"
        spec.write_text(json.dumps([
            {"schedule": {"at": soon}, "target": {"type": "webhook",
                                                 "url": f"http://127.0.0.1:{port}/{i}"}}
            for i in range(3)]))
        out = json.loads(cli("jobs", "import", "-f", str(spec), "--api-key", key,
                             "--json").stdout)
        created = out["ids"]
        assert len(created) == 3 == out["created"]
        listed = cli("jobs", "list", "--api-key", key).stdout
        assert all(job_id in listed for job_id in created)
        # live: each one-off slot is run at its time, once
        wait_for(lambda: len(receiver.fires) >= 3, timeout_s=60, every_s=0.5)
        assert sorted(fire.split("@")[0] for fire in receiver.fires) == sorted(created)
    gone = api.post("/v1/job-imports", json={"delete": [created[0]]})
    assert gone.status_code == 202, gone.text
    assert api.get(f"/v1/jobs/{created[0]}").status_code == 404
    # the delete reaches the jobs topic through the importer: the API's view, rebuilt from that
    # topic by a restart, would otherwise bring the job back; the tombstone is what it reads
    from confluent_kafka import Consumer, TopicPartition

    from streams.topology import JOBS, partition_for

    consumer = Consumer({**client_config(stack.s.bootstrap), "group.id": "test-imports",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(JOBS.name, partition_for(created[0], cluster_partitions()), 0)])

    def tombstone() -> bool:
        return any(m.error() is None and m.key() == created[0].encode() and m.value() is None
                   for m in consumer.consume(500, 0.5))

    try:
        wait_for(tombstone, timeout_s=60, every_s=0)
    finally:
        consumer.close()


def test_a_bad_job_refuses_the_whole_import_and_the_cli_names_it(stack, api, tmp_path):
    key = key_of(api)
    spec = tmp_path / "jobs.json"
    good = {"schedule": {"cron": "0 0 1 1 *"},
            "target": {"type": "webhook", "url": "http://127.0.0.1:9/x"}}
    spec.write_text(json.dumps([good, {**good, "schedule": {"cron": "61 * * * *"}}]))
    before = api.get("/v1/jobs", params={"limit": 500}).json()["items"]
    refused = cli("jobs", "import", "-f", str(spec), "--api-key", key, check=False)
    assert refused.returncode == 1, refused.stderr
    assert "HTTP 422" in refused.stderr and "line.2.schedule" in refused.stderr
    assert api.get("/v1/jobs", params={"limit": 500}).json()["items"] == before


def test_a_csv_import_streams_and_a_label_deletes_what_it_made(stack, api, tmp_path):
    key = key_of(api)
    team = f"t{datetime.now(UTC).strftime('%H%M%S%f')}"
    spec = tmp_path / "jobs.csv"
    spec.write_text("name,schedule.cron,target.type,target.url,labels.team\n" + "".join(
        f"csv {i},0 0 1 1 *,webhook,http://127.0.0.1:9/x,{team}\n" for i in range(1500)))
    out = json.loads(cli("jobs", "import", "-f", str(spec), "--api-key", key, "--json").stdout)
    assert (out["lines"], out["created"]) == (1501, 1500)
    labelled = api.get("/v1/jobs", params={"label": f"team:{team}", "limit": 500}).json()
    assert len(labelled["items"]) == 500 and labelled["next_cursor"]
    gone = json.loads(cli("jobs", "import", "--delete-label", f"team:{team}", "--api-key", key,
                          "--json").stdout)
    assert gone["deleted_by_label"] == 1500
    assert api.get("/v1/jobs", params={"label": f"team:{team}"}).json()["items"] == []
    assert api.get(f"/v1/jobs/{out['ids'][0]}").status_code == 404
