"""Reserved tenant names (issue 40): a Kafka target may write ``<tenant>.*``, so a tenant named
``cronstream`` could write ``cronstream.jobs`` or the ledger. The name is refused at creation,
and a tenant of that name created before it was reserved still reaches none of cronstream's
topics. Judged from the topic itself: nothing lands in it."""

from __future__ import annotations

import subprocess
import sys

import httpx

from stack import isolated
from streams.adapters import tenants
from streams.runtime.admin import end_offsets
from streams.topology import JOBS
from tests.conftest import cluster_partitions
from tests.waiting import wait_for


def test_the_cli_refuses_a_reserved_name_in_one_line(stack):
    for name in ("cronstream", "operator"):
        done = subprocess.run([sys.executable, "-m", "cli.main", "tenant", "create", name],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, (name, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and "reserved" in done.stderr, done.stderr


def test_a_tenant_named_cronstream_from_before_cannot_write_cronstreams_topics(stack):
    # written as a tenant record of before the names were reserved (the check is at creation)
    record, key = tenants.new_tenant("legacy-name")
    record["tenant"] = "cronstream"
    isolated.call("streams.adapters.tenants:write", stack.s.bootstrap, record,
                  stack.s.partitions, timeout_s=120)
    auth = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=stack.s.api_url, headers=auth, timeout=30) as api:
        wait_for(lambda: api.get("/v1/jobs").status_code == 200, timeout_s=60)
        count = JOBS.count(cluster_partitions())
        before = sum(end_offsets(stack.s.bootstrap, [(JOBS.name, p)
                                                     for p in range(count)]).values())
        response = api.post("/v1/jobs", json={"schedule": {"cron": "0 0 1 1 *"}, "target": {
            "type": "kafka", "topic": "cronstream.jobs", "value": "x"}})
        assert response.status_code == 422, response.text
        assert response.json()["detail"][0]["loc"] == ["body", "target", "topic"]
        after = sum(end_offsets(stack.s.bootstrap, [(JOBS.name, p)
                                                    for p in range(count)]).values())
    assert after == before
