"""The walking skeleton on the real stack: API → jobs topic → scheduler → fired → webhook → ledger →
Kafka Connect → PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg

from cli.demo import Receiver
from streams.scheduling.schedule import fire_id
from streams.topology import LEDGER
from tests.conftest import free_port
from tests.integration.helpers import sink_caught_up
from tests.waiting import wait_for


def ledger_rows(stack, job_id):
    with psycopg.connect(stack.s.pg_dsn) as conn:
        try:
            return conn.execute(
                "SELECT fire_id, nominal_time, decision, outcome, status_code FROM ledger "
                "WHERE job_id = %s ORDER BY nominal_time", (job_id,)).fetchall()
        except psycopg.errors.UndefinedTable:
            return []


def test_a_job_fires_every_two_seconds_into_postgres(stack, api):
    port = free_port()
    with Receiver(port) as receiver:
        end = (datetime.now(UTC) + timedelta(seconds=12)).replace(microsecond=500_000)
        last = end.replace(microsecond=0) - timedelta(seconds=end.second % 2)  # its last slot
        body = {
            "schedule": {"cron": "*/2 * * * * *", "end": end.isoformat()},
            "target": {"type": "webhook", "url": f"http://127.0.0.1:{port}/hook"},
        }
        response = api.post("/v1/jobs", json=body)
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]

        # its last slot is in Postgres, and so is every earlier one once the sink caught up
        # with what the ledger topic holds by then
        wait_for(lambda: (r := ledger_rows(stack, job_id)) and r[-1][1] == last.replace(tzinfo=None),
                 timeout_s=90, every_s=1)
        wait_for(sink_caught_up(stack, LEDGER))
        rows = ledger_rows(stack, job_id)

    assert len(rows) >= 3, f"expected >= 3 ledger rows in Postgres, got {rows}"
    nominal = [row[1].replace(tzinfo=UTC) for row in rows]
    for earlier, later in zip(nominal, nominal[1:], strict=False):
        assert later - earlier == timedelta(seconds=2), nominal
    for row, when in zip(rows, nominal, strict=True):
        assert when.second % 2 == 0 and when.microsecond == 0
        assert row[0] == fire_id(job_id, int(when.timestamp() * 1000))
        assert row[2:] == ("fired", "succeeded", 204)
    assert len(receiver.fires) == len(set(receiver.fires)), "a fire id reached the receiver twice"
    assert {row[0] for row in rows} <= set(receiver.fires)


def test_bad_requests_get_422_naming_the_field(api):
    url = "/v1/jobs"
    target = {"type": "webhook", "url": "http://127.0.0.1:9/hook"}
    cases = [
        ({"schedule": {"cron": "61 * * * *"}, "target": target}, "cron"),
        ({"schedule": {"cron": "* * * * *", "timezone": "Mars/Base"}, "target": target}, "timezone"),
        ({"schedule": {}, "target": target}, "schedule"),
        ({"schedule": {"cron": "* * * * *"}, "target": {"type": "pigeon"}}, "type"),
    ]
    for body, field in cases:
        response = api.post(url, json=body)
        assert response.status_code == 422, (body, response.text)
        assert field in response.text, (field, response.text)
    response = api.post(url, content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 422
