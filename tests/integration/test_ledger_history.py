"""A ledger entry written with an older schema version (``schemas/history/ledger.1.avsc``, the
ledger before campaigns) reaches Postgres through the real broker, Connect and the Debezium sink,
and the sink, which tolerates no errors, keeps running. Why: the ledger topic is compacted, so
entries written before a schema change stay in it and are read again whenever the sink starts
over; a converter that only knew the current schema stopped the sink on the first of them."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import psycopg

from stack import isolated
from streams.topology import LEDGER
from tests.conftest import cluster_partitions
from tests.integration.helpers import sink_caught_up, sink_paused
from tests.unit.runtime.test_codec import LEDGER_1
from tests.waiting import wait_for


def produce(bootstrap: str, old: dict[str, Any], current: dict[str, Any]) -> int:
    """Runs in a child process (``stack.isolated``): the test run keeps no Kafka client. The old
    entry goes first on its job's partition, so the current one arrives only if the sink got past
    the old one."""
    from streams.runtime.codec import codec
    from streams.runtime.emit import Emitter
    from streams.topology import LEDGER, partition_for
    from tests.unit.runtime.test_codec import encode_with_history

    part = partition_for(old["job_id"], LEDGER.count(cluster_partitions()))
    emitter = Emitter(bootstrap, "test-ledger-history")
    emitter.produce(LEDGER, old["record_id"], encode_with_history("ledger.1.avsc", old), part)
    emitter.produce(LEDGER, current["record_id"], codec().encode("LedgerEntry", current), part)
    return emitter.flush()


def rows(stack, job_id: str) -> dict[str, tuple]:
    with psycopg.connect(stack.s.pg_dsn) as conn:
        found = conn.execute(
            "SELECT record_id, outcome, status_code, attempts, lateness_ms, message_id, campaign_id, "
            "email FROM ledger WHERE job_id = %s", (job_id,)).fetchall()
    return {r[0]: r[1:] for r in found}


def sink_status(stack) -> dict[str, Any]:
    return httpx.get(f"{stack.connect_url}/connectors/cronstream-ledger-sink/status", timeout=10).json()


def test_a_ledger_entry_of_an_older_schema_version_reaches_postgres_and_the_sink_runs_on(stack):
    job_id = f"hist-{uuid.uuid4().hex[:8]}"
    old = {**LEDGER_1, "job_id": job_id, "tenant": "t-history", "record_id": f"{job_id}@1",
           "fire_id": f"{job_id}@1"}
    current = {**old, "record_id": f"{job_id}@2", "fire_id": f"{job_id}@2", "attempts": 2,
               "message_id": "msg-2", "campaign_id": None, "email": None}
    assert isolated.call(f"{__name__}:produce", stack.s.bootstrap, old, current, timeout_s=60) == 0

    found = wait_for(lambda: (r := rows(stack, job_id)) and len(r) == 2 and r, timeout_s=90,
                     explain=lambda: f"ledger sink: {sink_status(stack)}")
    # the old version's fields as written, the fields it lacks as the current schema's defaults
    assert found[old["record_id"]] == ("succeeded", 200, 1, 12, None, None, None)
    assert found[current["record_id"]] == ("succeeded", 200, 2, 12, "msg-2", None, None)
    status = sink_status(stack)
    assert status["connector"]["state"] == "RUNNING"
    assert status["tasks"] and {t["state"] for t in status["tasks"]} == {"RUNNING"}, status


def produce_runs(bootstrap: str, records: list[dict[str, Any]]) -> int:
    """Runs in a child process, as ``produce``: each record on its job's partition, in order."""
    from streams.runtime.codec import codec
    from streams.runtime.emit import Emitter
    from streams.topology import LEDGER, partition_for

    emitter = Emitter(bootstrap, "test-ledger-batch")
    for record in records:
        emitter.produce(LEDGER, record["record_id"], codec().encode("LedgerEntry", record),
                        partition_for(record["job_id"], LEDGER.count(cluster_partitions())))
    return emitter.flush()


def test_a_slot_recorded_twice_in_one_batch_of_the_sink_ends_as_its_newest_record(stack):
    """A slot run again (at least once, after a crash) is recorded again, and a sink replaying
    after a broker restart reads both records in one batch. Postgres ends at the newest for
    every slot and the sink runs on (with Debezium 3.0.7's reduction buffer the batch's upsert
    named the slot twice, failed, and stopped the sink for good: connectors/ledger.sql)."""
    job_id = f"twice-{uuid.uuid4().hex[:8]}"
    records = []
    for n in range(24):
        first = {**LEDGER_1, "job_id": job_id, "tenant": "t-batch", "record_id": f"{job_id}@{n}",
                 "fire_id": f"{job_id}@{n}", "outcome": "failed", "status_code": 503,
                 "message_id": None, "campaign_id": None, "email": None}
        records += [first, {**first, "outcome": "succeeded", "status_code": 200, "attempts": 2}]
    with sink_paused(stack, LEDGER):
        assert isolated.call(f"{__name__}:produce_runs", stack.s.bootstrap, records,
                             timeout_s=60) == 0
    wait_for(sink_caught_up(stack, LEDGER), timeout_s=120,
             explain=lambda: f"ledger sink: {sink_status(stack)}")
    found = rows(stack, job_id)
    assert len(found) == 24
    assert {row[:3] for row in found.values()} == {("succeeded", 200, 2)}
    assert {t["state"] for t in sink_status(stack)["tasks"]} == {"RUNNING"}
