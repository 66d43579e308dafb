"""Helpers for integration tests: the ledger as Postgres has it, and accounts of the system for a
failure's message. Waiting is ``tests.waiting``'s."""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg

from streams.runtime.settings import REPO_ROOT
from streams.topology import PROCESSORS, TopicSpec
from tests.conftest import cluster_partitions
from tests.waiting import wait_for

COLUMNS = ("fire_id", "nominal_time", "decision", "reason", "outcome", "status_code",
           "attempts", "epoch", "job_id", "message_id")


def ledger(stack, **where: str) -> list[dict[str, Any]]:
    clause = " AND ".join(f"{k} = %s" for k in where) or "TRUE"
    with psycopg.connect(stack.s.pg_dsn) as conn:
        try:
            rows = conn.execute(f"SELECT {', '.join(COLUMNS)} FROM ledger WHERE {clause} "
                                "ORDER BY nominal_time", tuple(where.values())).fetchall()
        except psycopg.errors.UndefinedTable:
            return []
    return [dict(zip(COLUMNS, row, strict=True)) for row in rows]


def caught_up(stack, group: str, tps: list[tuple[str, int]]) -> Callable[[], bool]:
    """A probe for ``wait_for``: ``group`` has committed past every record ``tps`` hold now (the
    ends are read here, so records written later do not keep it waiting)."""
    from confluent_kafka import KafkaException

    from streams.runtime.admin import committed_offsets, end_offsets

    ends = end_offsets(stack.s.bootstrap, tps)

    def probe() -> bool:
        try:
            committed = committed_offsets(stack.s.bootstrap, group)
        except KafkaException:
            # not yet: once, right after the fault suite's broker restart, this process's
            # AdminClient timed out on group requests until ``streams.runtime.admin.call``
            # replaced it (after ``STUCK_AFTER`` failures in a row), and polls that gave up at
            # the first failure failed three tests
            return False
        return all(committed.get(tp, 0) >= end for tp, end in ends.items())

    return probe


def sink_of(topic: TopicSpec) -> str:
    """The name of the Kafka Connect sink that reads ``topic`` (its connectors/*.json)."""
    sink = next(p for p in PROCESSORS if p.kind == "sink" and topic in p.consumes)
    name = re.search(r'"name":\s*"([^"]+)"', (REPO_ROOT / sink.module).read_text())
    assert name, f"{sink.module} names no connector"
    return name.group(1)


def sink_caught_up(stack, topic: TopicSpec) -> Callable[[], bool]:
    """A probe for ``wait_for``: Postgres holds every record ``topic`` holds now. Kafka Connect
    commits a sink's offset only once the rows before it are written. What a test waits for
    before reading Postgres to see that something did *not* happen (a run, a send)."""
    return caught_up(stack, f"connect-{sink_of(topic)}",
                     [(topic.name, p) for p in range(topic.count(cluster_partitions()))])


@contextmanager
def sink_paused(stack, topic: TopicSpec) -> Iterator[None]:
    """The sink of ``topic`` paused (it reads nothing) while the block runs: on resuming, its
    first batch holds every record written meanwhile, as a sink replaying after a restart reads
    them."""
    url = f"{stack.connect_url}/connectors/{sink_of(topic)}"

    def task_state() -> str:
        tasks = httpx.get(f"{url}/status", timeout=10).json().get("tasks") or [{}]
        return tasks[0].get("state", "")

    httpx.put(f"{url}/pause", timeout=10).raise_for_status()
    try:
        wait_for(lambda: task_state() == "PAUSED", timeout_s=60)
        yield
    finally:
        httpx.put(f"{url}/resume", timeout=10).raise_for_status()


def executor_caught_up(stack, job_ids: list[str]) -> Callable[[], bool]:
    """A probe for ``wait_for``: the workers have taken up every fired record of these jobs'
    partitions written so far. The executor acknowledges a fired record only once its outcome is
    on the ledger, after the call (``streams.execution.executor``): any run such a record made,
    a replayed or backfilled one's included, has called its target by then."""
    from streams.topology import FIRED, consumer_group, partition_for

    count = cluster_partitions()
    return caught_up(stack, consumer_group(FIRED),
                     sorted({(FIRED.name, partition_for(j, count)) for j in job_ids}))


def fired_slot(fire_id: str) -> datetime:
    """A fire id's nominal time as the ledger's ``nominal_time`` holds it (naive UTC)."""
    return datetime.fromisoformat(fire_id.rsplit("@", 1)[1].rstrip("Z"))


def worker_trouble(stack, lines: int = 40) -> str:
    """The last warnings and errors of every worker's log, and (py-spy) what each running worker
    is doing right now: enough to read a CI failure without its machine."""
    import shutil
    import subprocess

    from stack import processes

    out = []
    for log in sorted(stack.s.home.joinpath("logs").glob("worker-*.log")):
        bad = [line.rstrip() for line in log.open(errors="replace")
               if "[WARNING]" in line or "[ERROR]" in line or "Traceback" in line]
        out.append(f"--- {log.name}: last {lines} of {len(bad)} warnings/errors")
        out.extend(line[:300] for line in bad[-lines:])
        pid = processes.alive(stack.pidfile(log.stem))
        beside = Path(sys.executable).with_name("py-spy")
        spy = str(beside) if beside.exists() else shutil.which("py-spy")
        if pid and spy:
            dump = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True,
                                  text=True, timeout=30)
            out.append(f"--- {log.stem} threads now:\n{dump.stdout[-6000:]}")
    out.append(group_positions(stack))
    return "\n".join(out)


def group_positions(stack) -> str:
    """The workers' group position on every partition of the topics that hold work orders
    (committed offset / end): a partition whose commit sits below its end is waiting on a worker."""
    from streams.runtime.admin import committed_offsets, end_offsets
    from streams.topology import FANOUT, FIRED, consumer_group

    tps = [(t.name, p) for t in (FANOUT, FIRED) for p in range(t.count(cluster_partitions()))]
    try:
        ends = end_offsets(stack.s.bootstrap, tps)
        committed = {tp: offset for t in (FANOUT, FIRED)
                     for tp, offset in committed_offsets(stack.s.bootstrap, consumer_group(t)).items()
                     if tp[0] == t.name}
    except Exception as exc:  # noqa: BLE001 - a diagnostic: say why it is missing
        return f"--- group positions unavailable: {exc!r}"
    return "--- group positions (committed/end): " + ", ".join(
        f"{t}[{p}] {committed.get((t, p))}/{ends[(t, p)]}" for t, p in tps)


@contextmanager
def _faults(server: str, settings: dict[str, float]) -> Iterator[None]:
    """Trouble injected into a local AWS server at ``server`` (its ``/_local/faults``, the same
    fields for SES and SMS: ``stack.ses_server.Faults``), reset afterwards."""
    url = f"{server}/_local/faults"
    httpx.post(url, json=settings, timeout=5).raise_for_status()
    try:
        yield
    finally:
        httpx.post(url, json={}, timeout=5).raise_for_status()


def ses_faults(stack, **settings: float) -> Any:
    """Trouble injected into the local SES server (stack/ses_server.py), reset afterwards."""
    return _faults(stack.s.ses_endpoint, settings)


def sms_faults(stack, **settings: float) -> Any:
    """Trouble injected into the local SMS server (stack/sms_server.py, under the messaging
    server's ``/sms``), reset afterwards."""
    return _faults(stack.s.local_sms_endpoint, settings)


def sms_log_end(stack) -> int:
    """Where the SMS server's log ends now: ``sms_sent(stack, since=...)`` reads what came after."""
    log = stack.s.home / "sms" / "sent.jsonl"
    return log.stat().st_size if log.exists() else 0


def sms_sent(stack, since: int = 0) -> list[dict[str, Any]]:
    """The texts the local SMS server accepted (its own log: the independent record)."""
    log = stack.s.home / "sms" / "sent.jsonl"
    if not log.exists():
        return []
    with log.open("rb") as lines:
        lines.seek(since)
        return [json.loads(line) for line in lines.read().splitlines() if line]


class HeldCalls:
    """A test receiver's behaviour (``cli.demo.Receiver``): answer ``status`` after ``hold_s``,
    counting the calls held at once (``peak``)."""

    def __init__(self, hold_s: float, status: int = 200) -> None:
        self.hold_s, self.status = hold_s, status
        self.now = self.peak = 0
        self.lock = threading.Lock()

    def behave(self, fire_id: str, n: int) -> tuple[int, float]:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        threading.Timer(self.hold_s, self._ended).start()
        return self.status, self.hold_s

    def _ended(self) -> None:
        with self.lock:
            self.now -= 1


def skeleton_job_lands(api: httpx.Client, dsn: str, host: str = "127.0.0.1") -> None:
    """The walking skeleton on a stack of its own: a job every 2 s for 8 s calls its webhook
    (a receiver on ``host``) and its ``fired``/``succeeded`` rows land in PostgreSQL at ``dsn``,
    each for a fire id the webhook got."""
    from datetime import UTC, timedelta

    from cli.demo import Receiver
    from tests.conftest import free_port
    from tests.waiting import wait_for

    port = free_port()

    def rows(job_id: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            try:
                return conn.execute("SELECT fire_id, decision, outcome FROM ledger "
                                    "WHERE job_id = %s", (job_id,)).fetchall()
            except psycopg.errors.UndefinedTable:
                return []

    with Receiver(port, quiet=True, host=host) as receiver:
        end = datetime.now(UTC) + timedelta(seconds=8)
        created = api.post("/v1/jobs", json={
            "schedule": {"cron": "*/2 * * * * *", "end": end.isoformat()},
            "target": {"type": "webhook", "url": f"http://{host}:{port}/hook"}})
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        landed = wait_for(lambda: (r := rows(job_id)) and len(r) >= 2 and r, timeout_s=180,
                          every_s=1)
    assert all(row[1:] == ("fired", "succeeded") for row in landed), landed
    assert {row[0] for row in landed} <= set(receiver.fires)  # the webhook was called for each


def commit_at_end(bootstrap: str, group: str, topic: str, partition: int,
                  timeout_s: float = 60.0) -> int:
    """Commit ``group``'s offset on ``topic``[``partition``] at the partition's end, as a consumer
    that committed past records it never processed would have (run in a child process:
    ``stack.isolated``). The broker takes it only once the group has no member left, so it is
    asked again until then; returns the offset committed."""
    import time

    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

    from streams.runtime import admin

    end = admin.end_offsets(bootstrap, [(topic, partition)])[(topic, partition)]
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, partition, end)])]
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            done = admin.call(bootstrap, lambda client: client.alter_consumer_group_offsets(
                request)[group].result())
            failed = [tp.error for tp in done.topic_partitions if tp.error is not None]
        except KafkaException as exc:
            failed = [exc]
        if not failed and admin.committed_offsets(bootstrap, group).get((topic, partition)) == end:
            return end
        if time.monotonic() > deadline:
            raise TimeoutError(f"{group} offset on {topic}[{partition}] not committed at {end}: "
                               f"{failed}")
        time.sleep(0.5)  # a member's session has not expired yet


def sigkill(stack, name: str) -> int:
    """SIGKILL one of the stack's processes and wait until it is gone (a start right after would
    find it alive and its ready file there, and start nothing); when it was killed, in ms."""
    import os
    import signal
    import time

    from stack import processes
    from tests.waiting import wait_for

    pid = processes.alive(stack.pidfile(name))
    assert pid, f"{name} is not running"
    os.kill(pid, signal.SIGKILL)
    killed_ms = time.time_ns() // 1_000_000
    wait_for(lambda: processes.alive(stack.pidfile(name)) is None, timeout_s=30, every_s=0.05)
    return killed_ms


def worker_metrics(stack, name: str, workers: Iterable[int] = range(1, 5)) -> dict[int, float]:
    """The metric ``name`` of each running worker of ``workers`` (its series summed over their
    labels; 0 before its first), from the worker's /metrics."""
    from stack import processes

    pattern = re.compile(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", re.MULTILINE)
    values = {}
    for n in workers:
        if processes.alive(stack.pidfile(f"worker-{n}")):
            text = httpx.get(f"http://127.0.0.1:{stack.s.worker_metrics_port + n}/metrics",
                             timeout=30).text
            values[n] = sum(float(m.group(1)) for m in pattern.finditer(text))
    return values
