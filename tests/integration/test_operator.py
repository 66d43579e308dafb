"""The operator's surface on the real stack: lag against Kafka's own tool, metrics and health of
workers and API, replays (``cronstream replay`` and the console-tool recipe) that send nothing
twice."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from cli.demo import Receiver
from ops import lag
from stack import processes
from streams.runtime.admin import client as admin_client
from streams.runtime.kafka_config import client_config, producer_config
from streams.topology import (
    APP_ID,
    FANOUT,
    FIRED,
    JOBS,
    LEDGER,
    RECIPIENT_OUTCOMES,
    consumer_group,
    partition_for,
)
from tests.conftest import cluster_partitions, free_port
from tests.integration.helpers import (
    caught_up,
    executor_caught_up,
    fired_slot,
    ledger,
    sink_caught_up,
)
from tests.integration.test_campaigns import campaign_body, csv_lines, outcomes, upload
from tests.waiting import wait_for


def cli(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True,
                          text=True, timeout=timeout, env=os.environ.copy())
    if check:
        assert done.returncode == 0, f"cronstream {' '.join(args)}: {done.stderr}"
    return done


def consumer_groups_describe(group: str) -> set[tuple[str, int, int | None, int, int | None]]:
    """Kafka's own ``kafka-consumer-groups --describe``, parsed."""
    out = cli("kafka", "consumer-groups", "--describe", "--group", group).stdout
    rows = set()
    for line in out.splitlines():
        cells = line.split()
        if len(cells) >= 6 and cells[0] == group:
            current = None if cells[3] == "-" else int(cells[3])
            rows.add((cells[1], int(cells[2]), current, int(cells[4]),
                      None if cells[5] == "-" else int(cells[5])))
    return rows


class LagGroup(NamedTuple):
    topic: str
    group: str
    oldest_ms: int  # the timestamp of its oldest unprocessed record (partition 0, offset 4)
    since: float  # time.time() once the group had committed


def aged(seconds: float, stamp_ms: int, since: float, until: float, resolution: float) -> bool:
    """``seconds`` is the age of a record stamped ``stamp_ms`` at some moment between ``since``
    and ``until`` (``time.time()`` readings around the read), to ``resolution``: a time lag
    checked against the clock it was read by, however long the read took."""
    return since - stamp_ms / 1000 - resolution <= seconds <= until - stamp_ms / 1000 + resolution


@pytest.fixture
def lag_group(stack):
    """A topic of 3 partitions × 10 records stamped 90 s ago, and a group that committed 4 on
    partition 0 and 10 on partition 1 (nothing on 2): a lag whose every figure is known."""
    topic, group = f"cronstream-test-lag-{uuid.uuid4().hex[:8]}", f"lagtest-{uuid.uuid4().hex[:8]}"
    admin = admin_client(stack.s.bootstrap)
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result()
    producer = Producer(producer_config(stack.s.bootstrap))
    stamp = int(time.time() * 1000) - 90_000
    for p in range(3):
        for i in range(10):
            producer.produce(topic, key=f"k{i}", value=b"v", partition=p, timestamp=stamp + i)
    assert producer.flush(30) == 0
    committer = Consumer({**client_config(stack.s.bootstrap), "group.id": group})
    committer.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 10)],
                     asynchronous=False)
    committer.close()
    yield LagGroup(topic, group, stamp + 4, time.time())
    admin.delete_topics([topic])


def test_lag_matches_kafka_consumer_groups(stack, lag_group):
    topic, group = lag_group.topic, lag_group.group
    before = time.time()
    ours = lag.read(stack.s.bootstrap, [group])
    after = time.time()
    assert {(r.topic, r.partition, r.committed, r.end, r.lag) for r in ours} \
        == consumer_groups_describe(group) == {(topic, 0, 4, 10, 6), (topic, 1, 10, 10, 0)}
    by_part = {r.partition: r for r in ours}
    # the age of the record at offset 4 (stamped 90 s before it was written) when it was read
    assert aged(by_part[0].time_lag_s, lag_group.oldest_ms, before, after, 0.001), by_part[0]
    assert by_part[1].time_lag_s == 0.0
    printed = json.loads(cli("lag", "--group", group, "--json").stdout)
    assert [(r["partition"], r["lag"]) for r in printed] == [(0, 6), (1, 0)]
    before = time.time()
    printed = cli("lag", "--group", group).stdout
    after = time.time()
    row = re.search(rf"{group}\s+{topic}\s+0\s+4\s+10\s+6\s+(\d+\.\d)(?!\d)", printed)
    assert row and aged(float(row.group(1)), lag_group.oldest_ms, before, after, 0.05), printed


def test_lag_through_the_api_and_prometheus(stack, api, lag_group):
    topic, group = lag_group.topic, lag_group.group
    key = os.environ["CRONSTREAM_OPERATOR_KEY"]
    url = f"{stack.s.api_url}/v1/ops/lag"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers=api.headers).status_code == 401  # a tenant's key is not enough
    body = httpx.get(url, params={"group": group}, headers={"Authorization": f"Bearer {key}"},
                     timeout=30).json()
    items = body["items"]
    # the workers' run backlog (ops.lag.run_backlog): every fired partition of their group,
    # whatever the filter (``stack up`` commits each one's start for the group)
    assert body["run_backlog"]["partitions"] == FIRED.count(cluster_partitions()), body["run_backlog"]
    assert {(i["partition"], i["committed"], i["end"], i["lag"]) for i in items} \
        == {(0, 4, 10, 6), (1, 10, 10, 0)}
    assert httpx.get(f"{stack.s.api_url}/metrics", timeout=30).status_code == 401
    scraped = httpx.get(f"{stack.s.api_url}/metrics", headers={"Authorization": f"Bearer {key}"},
                        timeout=30).text
    until = time.time()
    assert f'cronstream_consumer_lag{{group="{group}",partition="0",topic="{topic}"}} 6.0' in scraped
    # read from Kafka (or the API's cache of a read) some time after the group committed
    seconds = re.search(rf'cronstream_consumer_lag_seconds{{group="{group}",partition="0",'
                        rf'topic="{topic}"}} (\S+)', scraped)
    assert seconds and aged(float(seconds.group(1)), lag_group.oldest_ms, lag_group.since, until,
                            0.001), scraped
    # the executor's group is there too (its fired offsets), as kafka-consumer-groups sees it
    assert (f'cronstream_consumer_lag{{group="{consumer_group(FIRED)}",partition="0",'
            f'topic="{FIRED.name}"}}') in scraped


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of a metric's samples whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"{name}(?:{{(.*)}})? (\S+)$", line)
        if m and all(f'{k}="{v}"' in (m.group(1) or "") for k, v in labels.items()):
            total += float(m.group(2))
    return total


def worker_metrics(stack) -> str:
    """The concatenated /metrics of every running worker (worker-N serves on base + N)."""
    texts = []
    for n in range(1, 5):
        if processes.alive(stack.pidfile(f"worker-{n}")):
            url = f"http://127.0.0.1:{stack.s.worker_metrics_port + n}/metrics"
            texts.append(httpx.get(url, timeout=10).text)
    return "\n".join(texts)


def every_second_job(api, port: int) -> dict:
    response = api.post("/v1/jobs", json={"schedule": {"cron": "* * * * * *"}, "target": {
        "type": "webhook", "url": f"http://127.0.0.1:{port}/hook"}})
    assert response.status_code == 201, response.text
    return response.json()


def executed(stack, job_id: str) -> list[dict]:
    """The job's ledger rows but the ``skipped_paused`` ones a paused job keeps adding."""
    return [r for r in ledger(stack, job_id=job_id) if r["decision"] != "skipped_paused"]


def settled_runs(stack, api, receiver: Receiver, job_id: str, at_least: int) -> list[dict]:
    """Pause the job once it ran ``at_least`` times; its executed rows once the runs in flight
    at the pause have landed: every second from its first slot (a row or a call) to its first
    ``skipped_paused`` one has a row."""
    wait_for(lambda: len([r for r in ledger(stack, job_id=job_id) if r["outcome"] == "succeeded"])
             >= at_least, timeout_s=90)
    assert api.post(f"/v1/jobs/{job_id}/pause").status_code == 200

    def settled() -> list[dict] | None:
        rows = ledger(stack, job_id=job_id)
        paused = [r["nominal_time"] for r in rows if r["decision"] == "skipped_paused"]
        runs = [r for r in rows if r["decision"] != "skipped_paused"]
        called = [fired_slot(f) for f in receiver.fires if f.startswith(f"{job_id}@")]
        if not paused or not (runs or called):
            return None
        slot, landed = min([r["nominal_time"] for r in runs] + called), {
            r["nominal_time"] for r in runs}
        while slot < min(paused):
            if slot not in landed:
                return None
            slot += timedelta(seconds=1)
        return runs

    return wait_for(settled, timeout_s=60)


def test_worker_and_api_health_and_metrics(stack, api):
    base = f"http://127.0.0.1:{stack.s.worker_metrics_port + 1}"
    assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
    ready = httpx.get(f"{base}/readyz", timeout=5).json()
    assert ready["status"] == "ok" and ready["recovered"] and ready["partitions"]
    operator = {"Authorization": f"Bearer {os.environ['CRONSTREAM_OPERATOR_KEY']}"}
    api_ready = httpx.get(f"{stack.s.api_url}/readyz", headers=operator, timeout=10)
    assert api_ready.status_code == 200, api_ready.text
    assert api_ready.json()["workers"] >= 1 and api_ready.json()["unassigned"] == []
    before = worker_metrics(stack)
    with Receiver(port := free_port(), quiet=True) as receiver:
        job = every_second_job(api, port)
        settled_runs(stack, api, receiver, job["id"], 3)
    after = worker_metrics(stack)
    for name, labels in (("cronstream_slots_decided_total", {"decision": "fired"}),
                         ("cronstream_executions_total", {"outcome": "succeeded"}),
                         ("cronstream_fire_lateness_seconds_count", {}),
                         ("cronstream_slots_reached_total", {"prepared": "ahead"})):
        assert metric(after, name, **labels) - metric(before, name, **labels) >= 3, name
    assert metric(after, "cronstream_rebalances_total") >= 1
    assert metric(after, "cronstream_assigned_partitions") >= 1


def test_cronstream_replay_of_fired_runs_nothing_twice(stack, api):
    with Receiver(port := free_port(), quiet=True) as receiver:
        since = datetime.now(UTC).isoformat()
        job = every_second_job(api, port)
        runs = settled_runs(stack, api, receiver, job["id"], 4)
        calls = list(receiver.fires)
        part = partition_for(job["id"], cluster_partitions())
        dry = json.loads(cli("replay", "--topic", "fired", "--partition", str(part),
                             "--from-time", since, "--dry-run", "--json").stdout)
        assert "copied" not in dry and dry["ranges"][0]["records"] >= 4
        done = json.loads(cli("replay", "--topic", "fired", "--partition", str(part),
                              "--from-time", since, "--json").stdout)
        assert done["copied"] == dry["ranges"][0]["records"]
        wait_for(executor_caught_up(stack, [job["id"]]), timeout_s=180)
        wait_for(sink_caught_up(stack, LEDGER), timeout_s=60)
        assert receiver.fires == calls, "a replayed fired record called the webhook again"
    assert executed(stack, job["id"]) == runs


def test_replay_refuses_state_topics_and_bad_ranges(stack):
    refused = cli("replay", "--topic", "jobs", "--from-offset", "0", check=False)
    assert refused.returncode == 2 and "cronstream.jobs cannot be replayed safely" in refused.stderr
    bad = cli("replay", "--topic", "fired", "--from-time", "yesterday", check=False)
    assert bad.returncode == 2 and "--from-time: 'yesterday' is not an RFC 3339 time" in bad.stderr
    none = cli("replay", "--topic", "fired", "--partition", "99", "--from-offset", "0", check=False)
    assert none.returncode == 2 and "has no partition 99" in none.stderr


def fired_offsets_of(job_id: str, partition: int) -> list[int]:
    """The console-consumer step of the recipe: offsets of a job's fired records."""
    out = cli("kafka", "console-consumer", "--topic", FIRED.name, "--partition", str(partition),
              "--offset", "earliest", "--timeout-ms", "8000", "--property", "print.offset=true",
              "--property", "print.key=true", "--property", "print.value=false").stdout
    offsets = []
    for line in out.splitlines():
        m = re.match(r"Offset:(\d+)\s+(\S+)", line)
        if m and m.group(2) == job_id:
            offsets.append(int(m.group(1)))
    return offsets


def test_console_tools_recipe_replays_fired_without_resending(stack, api):
    """docs/operations.md, "Replay with Kafka's tools": find the offsets with the console
    consumer, stop the workers, rewind the group on the fired and jobs topics with
    kafka-consumer-groups, start them again: no webhook called twice, no email re-sent."""
    sent_before = stack.ses_log.read_text().count("\n") if stack.ses_log.exists() else 0
    with Receiver(port := free_port(), quiet=True) as receiver:
        job = every_second_job(api, port)
        runs = settled_runs(stack, api, receiver, job["id"], 3)
        calls = list(receiver.fires)
        part = partition_for(job["id"], cluster_partitions())
        offsets = fired_offsets_of(job["id"], part)
        assert len(offsets) >= 3
        processes.stop(stack.pidfile("worker-1"))
        try:
            reset = wait_for(lambda: (r := cli(
                "kafka", "consumer-groups", "--group", consumer_group(FIRED), "--reset-offsets",
                "--topic", f"{FIRED.name}:{part}", "--to-offset", str(offsets[0]), "--execute",
                check=False)).returncode == 0 and "inactive" not in r.stdout + r.stderr and r,
                timeout_s=60, every_s=3)
            assert str(offsets[0]) in reset.stdout
            # and the job definitions from the start: re-applied, they change nothing
            jobs_reset = cli("kafka", "consumer-groups", "--group", consumer_group(JOBS),
                             "--reset-offsets",
                             "--topic", f"{JOBS.name}:{part}", "--to-earliest", "--execute")
            assert JOBS.name in jobs_reset.stdout
        finally:
            stack.start_worker("worker-1")
        wait_for(executor_caught_up(stack, [job["id"]]), timeout_s=180)
        wait_for(sink_caught_up(stack, LEDGER), timeout_s=60)
        assert receiver.fires == calls, "a rewound fired record called the webhook again"
    assert executed(stack, job["id"]) == runs
    sent_after = stack.ses_log.read_text().count("\n") if stack.ses_log.exists() else 0
    assert sent_after == sent_before, "rewinding fired re-sent an email"


def test_replay_of_fanout_sends_nothing_again_and_watch_shows_it_done(stack, api):
    subject = f"replay {uuid.uuid4().hex[:8]}"
    created = api.post("/v1/campaigns", json={**campaign_body(seconds=1), "subject": subject}).json()
    since = datetime.now(UTC).isoformat()
    assert upload(api, created["id"], csv_lines(300, domain=f"{uuid.uuid4().hex[:6]}.example"))[
        "recipients"] == 300
    assert api.post(f"/v1/campaigns/{created['id']}/schedule").status_code == 200
    key = api.headers["Authorization"].split()[1]
    watched = cli("campaigns", "watch", created["id"], "--api-key", key, "--every-s", "1",
                  "--timeout-s", "240", timeout=300)
    assert "done" in watched.stdout.splitlines()[-1] and "100.0%" in watched.stdout
    before = Counter(outcomes(stack, created["id"]).values())
    assert before == {"sent": 300}
    sends = metric(worker_metrics(stack), "cronstream_campaign_sends_total")
    lines = stack.ses_log.read_text().count(subject)
    done = json.loads(cli("replay", "--topic", "fanout", "--from-time", since, "--json").stdout)
    assert done["copied"] >= 1
    parts = [r["partition"] for r in done["ranges"]]
    # an order is acknowledged once its walk is done, after its sends (streams.campaigns.fanout)
    wait_for(caught_up(stack, APP_ID, [(FANOUT.name, p) for p in parts]), timeout_s=180)
    wait_for(sink_caught_up(stack, RECIPIENT_OUTCOMES), timeout_s=60)
    assert stack.ses_log.read_text().count(subject) == lines == 300
    assert metric(worker_metrics(stack), "cronstream_campaign_sends_total") == sends
    assert Counter(outcomes(stack, created["id"]).values()) == before


def test_every_partition_the_workers_consume_has_a_committed_offset(stack):
    """A new owner of a partition resumes from the group's commit; without one it was seen to
    start at the end and never deliver an order written before its first owner died."""
    from streams.runtime.admin import agent_topics

    rows = lag.read(stack.s.bootstrap, [APP_ID])
    for topic in agent_topics():
        parts = [r for r in rows if r.topic == topic]
        assert parts and all(r.committed is not None for r in parts), (topic, parts)
