"""Executor behaviour on the real stack: retries with backoff, dead letters, overlap policies."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

from confluent_kafka import Consumer, KafkaError

from cli.demo import Receiver
from streams.runtime.codec import codec
from streams.runtime.kafka_config import client_config
from streams.topology import DLQ
from tests.conftest import free_port
from tests.integration.helpers import HeldCalls, ledger
from tests.waiting import wait_for


def one_shot(port: int, **extra) -> dict:
    at = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    return {"schedule": {"at": at}, "target": {"type": "webhook", "url": f"http://127.0.0.1:{port}/h"},
            **extra}


def dead_letters(stack, fire_id: str) -> list[dict]:
    """The dead letters of ``fire_id``, reading the whole topic (a benchmark run on the same stack
    leaves thousands of others in it)."""
    consumer = Consumer({**client_config(stack.s.bootstrap), "group.id": str(uuid.uuid4()),
                         "auto.offset.reset": "earliest", "enable.partition.eof": True})
    consumer.subscribe([DLQ.name])
    found, at_end, deadline = [], set(), time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                    continue
                if msg.key().decode() == fire_id:
                    found.append(codec().decode(msg.value()))
            assignment = consumer.assignment()
            if assignment and at_end >= {tp.partition for tp in assignment}:
                break
    finally:
        consumer.close()
    return found


def test_retries_until_success_then_records_attempts(stack, api):
    port = free_port()
    with Receiver(port, behave=lambda fid, n: (503 if n <= 2 else 200, 0), quiet=True) as rx:
        job = api.post("/v1/jobs", json=one_shot(port, retry={"max_attempts": 4,
                                                              "initial_backoff_s": 0.2})).json()
        row = wait_for(lambda: ledger(stack, job_id=job["id"]))[0]
    assert row["outcome"] == "succeeded" and row["attempts"] == 3 and row["status_code"] == 200
    assert len(rx.fires) == 3


def test_exhausted_retries_go_to_the_dead_letter_topic(stack, api):
    port = free_port()
    with Receiver(port, behave=lambda fid, n: (500, 0), quiet=True) as rx:
        job = api.post("/v1/jobs", json=one_shot(port, retry={"max_attempts": 2,
                                                              "initial_backoff_s": 0.1})).json()
        row = wait_for(lambda: ledger(stack, job_id=job["id"]))[0]
    assert row["outcome"] == "failed" and row["attempts"] == 2 and row["status_code"] == 500
    assert len(rx.fires) == 2
    letter = wait_for(lambda: dead_letters(stack, row["fire_id"]), timeout_s=30)[0]
    assert letter["attempts"] == 2 and letter["last_error"] == "HTTP 500"


def test_a_client_error_is_not_retried(stack, api):
    port = free_port()
    with Receiver(port, behave=lambda fid, n: (404, 0), quiet=True) as rx:
        job = api.post("/v1/jobs", json=one_shot(port)).json()
        row = wait_for(lambda: ledger(stack, job_id=job["id"]))[0]
    assert row["outcome"] == "failed" and row["attempts"] == 1 and len(rx.fires) == 1


def run_slow_job(stack, api, policy: str) -> tuple[list[dict], HeldCalls]:
    port, gauge = free_port(), HeldCalls(hold_s=2.5)
    with Receiver(port, behave=gauge.behave, quiet=True):
        end = datetime.now(UTC) + timedelta(seconds=6)
        job = api.post("/v1/jobs", json={
            "schedule": {"cron": "*/1 * * * * *", "end": end.isoformat()},
            "target": {"type": "webhook", "url": f"http://127.0.0.1:{port}/h", "timeout_s": 10},
            "overlap": policy}).json()
        rows = wait_for(lambda: (r := ledger(stack, job_id=job["id"])) and len(r) >= 6 and
                        all(x["outcome"] != "pending" for x in r) and r, timeout_s=60)
    return rows, gauge


def test_overlap_skip_records_skipped_slots(stack, api):
    rows, gauge = run_slow_job(stack, api, "skip")
    decisions = [r["decision"] for r in rows]
    assert "skipped_overlap" in decisions and "fired" in decisions
    assert gauge.peak == 1


def test_overlap_buffer_one_runs_one_after_another(stack, api):
    rows, gauge = run_slow_job(stack, api, "buffer_one")
    decisions = [r["decision"] for r in rows]
    assert decisions.count("fired") >= 2 and "skipped_overlap" in decisions
    assert gauge.peak == 1
