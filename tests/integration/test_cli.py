"""The ``cronstream`` CLI against the real stack: jobs from YAML/JSON, campaigns end to end with
an upload's progress, suppressions, the topology, and the exit codes scripts rely on."""

from __future__ import annotations

import json
import shutil
import uuid
from datetime import UTC, datetime, timedelta

import yaml

from cli.demo import Receiver
from cli.failures import DENIED, UNREACHABLE
from tests.conftest import free_port
from tests.integration.test_operator import cli
from tests.waiting import wait_for


def key_of(api) -> str:
    return api.headers["Authorization"].split()[1]


def test_jobs_from_a_yaml_file_through_their_life(stack, api, tmp_path):
    key = key_of(api)
    with Receiver(port := free_port(), quiet=True) as receiver:
        far = (datetime.now(UTC) + timedelta(days=30)).isoformat()
        spec = tmp_path / "jobs.yaml"
        spec.write_text(yaml.safe_dump([
            {"schedule": {"at": far}, "target": {"type": "webhook", "url": f"http://127.0.0.1:{port}/a"}},
            {"schedule": {"cron": "0 9 * * MON", "timezone": "Europe/Paris"},
             "target": {"type": "webhook", "url": f"http://127.0.0.1:{port}/b"}},
        ]))
        created = json.loads(cli("jobs", "create", "-f", str(spec), "--api-key", key, "--json").stdout)
        assert len(created) == 2
        first = created[0]["id"]
        listed = cli("jobs", "list", "--api-key", key).stdout
        assert first in listed and "Europe/Paris" in listed
        assert "paused" in cli("jobs", "pause", first, "--api-key", key).stdout
        assert json.loads(cli("jobs", "get", first, "--api-key", key, "--json").stdout)["paused"]
        cli("jobs", "resume", first, "--api-key", key)
        cli("jobs", "trigger", first, "--api-key", key)
        runs = wait_for(lambda: json.loads(cli("jobs", "runs", first, "--api-key", key,
                                               "--json").stdout), timeout_s=60, every_s=1)
        assert runs[0]["outcome"] == "succeeded" and len(receiver.fires) == 1
        assert "succeeded" in cli("jobs", "runs", first, "--api-key", key).stdout
        cli("jobs", "delete", created[1]["id"], "--api-key", key)
        assert created[1]["id"] not in cli("jobs", "list", "--api-key", key).stdout


def test_bad_input_and_failures_have_distinct_exit_codes(stack, api, tmp_path):
    key = key_of(api)
    bad_cron = tmp_path / "bad.json"
    bad_cron.write_text(json.dumps({"schedule": {"cron": "61 * * * *"},
                                    "target": {"type": "webhook", "url": "http://127.0.0.1:9/x"}}))
    refused = cli("jobs", "create", "-f", str(bad_cron), "--api-key", key, check=False)
    assert refused.returncode == 1 and "HTTP 422" in refused.stderr and "schedule" in refused.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("schedule: [\n")
    unreadable = cli("jobs", "create", "-f", str(broken), "--api-key", key, check=False)
    assert unreadable.returncode == 2 and "not valid YAML" in unreadable.stderr
    no_key = cli("jobs", "list", "--api-key", "", check=False)
    assert no_key.returncode == 2 and "no API key" in no_key.stderr
    down = cli("jobs", "list", "--api-key", key, "--api-url", f"http://127.0.0.1:{free_port()}",
               check=False)
    assert down.returncode == UNREACHABLE and "the API at http://127.0.0.1:" in down.stderr
    assert "connection refused" in down.stderr and "Traceback" not in down.stderr
    wrong_key = cli("jobs", "list", "--api-key", "cs_not-a-key", check=False)
    assert wrong_key.returncode == DENIED and "refused the API key (HTTP 401" in wrong_key.stderr
    missing = cli("jobs", "get", "no-such-job", "--api-key", key, check=False)
    assert missing.returncode == 1 and "HTTP 404" in missing.stderr


def test_campaign_create_upload_schedule_watch_and_suppress(stack, api, tmp_path):
    key = key_of(api)
    body = tmp_path / "campaign.yaml"
    body.write_text(yaml.safe_dump({
        "name": "cli", "from": "news@example.com", "subject": "cli {{name}}", "text": "hi {{name}}",
        "send_at": (datetime.now(UTC) + timedelta(seconds=20)).isoformat(), "send_deadline_s": 600}))
    created = json.loads(cli("campaigns", "create", "-f", str(body), "--api-key", key,
                             "--json").stdout)
    csv = tmp_path / "people.csv"
    csv.write_text("email,name\n" + "".join(f"cli{i}@cli.example,N{i}\n" for i in range(400))
                   + "not-an-address,Bad\n")
    uploaded = cli("campaigns", "upload", created["id"], "-f", str(csv), "--api-key", key)
    assert "accepted 400 recipients" in uploaded.stdout and "1 bad rows" in uploaded.stdout
    assert "line 402" in uploaded.stdout and "uploading people.csv" in uploaded.stderr
    cli("suppressions", "add", "cli7@cli.example", "--api-key", key)
    assert "scheduled" in cli("campaigns", "schedule", created["id"], "--api-key", key).stdout
    watched = cli("campaigns", "watch", created["id"], "--api-key", key, "--timeout-s", "240",
                  timeout=300)
    last = watched.stdout.strip().splitlines()[-1]
    assert "done" in last and "100.0%" in last and "sent=399" in last and "suppressed=1" in last
    assert "sent=399" in cli("campaigns", "get", created["id"], "--api-key", key).stdout
    cli("suppressions", "remove", "cli7@cli.example", "--api-key", key)
    timed_out = cli("campaigns", "watch", "nope", "--api-key", key, check=False)
    assert timed_out.returncode == 1 and "HTTP 404" in timed_out.stderr


def test_topology_prints_every_format_and_renders_when_graphviz_is_there(tmp_path):
    assert "client: execute_fired (streams.execution.executor)" in cli("topology").stdout
    assert cli("topology", "--format", "mermaid").stdout.startswith("flowchart LR")
    assert cli("topology", "--format", "dot").stdout.startswith("digraph cronstream")
    bad = cli("topology", "--render", str(tmp_path / "g.gif"), check=False)
    assert bad.returncode == 2 and "must end in .svg or .png" in bad.stderr
    rendered = cli("topology", "--render", str(tmp_path / "g.svg"), check=False)
    if shutil.which("dot"):
        assert rendered.returncode == 0 and (tmp_path / "g.svg").read_text().startswith("<?xml")
    else:
        assert rendered.returncode == 1 and "apt-get install graphviz" in rendered.stderr


def test_tenant_create_prints_a_working_key_once(stack):
    name = f"cli{uuid.uuid4().hex[:8]}"
    made = json.loads(cli("tenant", "create", name, "--json").stdout)
    assert made["tenant"] == name
    listed = wait_for(lambda: (r := cli("jobs", "list", "--api-key", made["api_key"],
                                        check=False)).returncode == 0 and r, timeout_s=30)
    assert "no jobs" in listed.stdout
    bad = cli("tenant", "create", "Not A Name", check=False)
    assert bad.returncode == 2 and "name:" in bad.stderr
