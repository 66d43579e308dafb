"""Every query in docs/sql.md runs against the stack's Postgres and finds what it promises."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import psycopg

from cli.demo import Receiver
from tests.conftest import free_port
from tests.integration.helpers import ledger
from tests.integration.test_campaigns import campaign_body, csv_lines, outcomes, upload
from tests.waiting import wait_for

DOC = Path(__file__).resolve().parents[2] / "docs" / "sql.md"


def queries() -> list[str]:
    return re.findall(r"```sql\n(.*?)```", DOC.read_text(), re.S)


def run(stack, sql: str, **values: str) -> list[tuple]:
    """psql's ``:'name'`` variables bound as parameters, as psql would quote them."""
    names = re.findall(r":'(\w+)'", sql)
    with psycopg.connect(stack.s.pg_dsn) as conn:
        return conn.execute(re.sub(r":'\w+'", "%s", sql), [values[n] for n in names]).fetchall()


def test_every_documented_query_runs_and_answers(stack, api):
    # the receiver answers until the end: a slot fired before the pause took effect, run
    # after the receiver closed, was a failed run in the tenant's failed-runs query (seen once)
    with Receiver(port := free_port(), quiet=True):
        answers_every_run(stack, api, port)


def answers_every_run(stack, api, port: int) -> None:
    job = api.post("/v1/jobs", json={"schedule": {"cron": "* * * * * *"}, "target": {
        "type": "webhook", "url": f"http://127.0.0.1:{port}/h"}}).json()
    wait_for(lambda: len(ledger(stack, job_id=job["id"])) >= 2, timeout_s=60)
    api.post(f"/v1/jobs/{job['id']}/pause")
    domain = f"{uuid.uuid4().hex[:6]}.example"
    campaign = api.post("/v1/campaigns", json=campaign_body(seconds=1)).json()
    upload(api, campaign["id"], csv_lines(20, domain=domain))
    api.post(f"/v1/campaigns/{campaign['id']}/schedule")
    wait_for(lambda: len(outcomes(stack, campaign["id"])) == 20, timeout_s=120)
    values = {"job_id": job["id"], "tenant": api.tenant, "campaign_id": campaign["id"],
              "email": f"user3@{domain}", "window_s": "86400"}
    found = [run(stack, sql, **values) for sql in queries()]
    assert len(found) == 12
    runs, not_run, channels, late, one_address, kept, counts, sent_to, unknown, failed, delivery, \
        feedback = found
    assert unknown == []  # tests/integration/test_unknown_resolved.py lists some
    assert len(runs) >= 2 and {r[0].split("@")[0] for r in runs} == {job["id"]}
    assert job["id"] in {row[0] for row in late}  # (the campaign's tick is a job slot too)
    assert one_address == [(campaign["id"], f"user3@{domain}", "sent", None,
                            one_address[0][4], one_address[0][5])] and one_address[0][4]
    assert counts == [("sent", 20)] and kept == counts  # the kept counts equal a recount
    # the campaign's mails (tests/integration/test_reminder_channels.py has a reminder's texts)
    assert channels == [("campaign", "email", "sent", 20)]
    assert [r[0] for r in sent_to] == [campaign["id"]]
    assert failed == [] and isinstance(not_run, list)
    # no SES events subscribed here (tests/integration/test_feedback_suppressions.py has them)
    assert delivery == [(0, 0, 0, 0, 0, 0)] and feedback == []
