"""Reminders as users set them up (seed 002, issue 45 item 5): one job, an email and a text for
each slot, both sent or the preferred one with the other as its fallback when the recipient is
suppressed; each channel's outcome its own ledger row (``<fire id>#<channel>``). Judged from the
SES and SMS servers' own logs, not the ledger alone."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest

from streams.execution.targets import FIRE_ID_HEADER
from tests.conftest import make_client
from tests.integration.helpers import sms_log_end, sms_sent
from tests.integration.test_campaigns import ses_log_end, ses_sent
from tests.waiting import wait_for

OURS = "+18005550100"
START: dict[str, int] = {}
SQL_DOC = Path(__file__).resolve().parents[2] / "docs" / "sql.md"


@pytest.fixture(scope="module")
def client(stack) -> Iterator[httpx.Client]:
    """A tenant granted the suite's senders and the origination number ``OURS``."""
    START.update(ses=ses_log_end(stack), sms=sms_log_end(stack))
    with make_client(stack, sms_originations=[OURS]) as tenant_client:
        yield tenant_client


def job(number: str, address: str, deliver: str) -> dict:
    at = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    return {"schedule": {"at": at}, "target": {"type": "reminder", "deliver": deliver, "channels": [
        {"type": "sms", "to": number, "body": "Dentist tomorrow at 9", "origination": OURS},
        {"type": "email", "to": address, "from": "reminders@example.com",
         "subject": "Dentist tomorrow", "text": "At 9."}]}}


def rows(stack, job_id: str) -> dict[str, dict]:
    """The job's ledger rows by channel."""
    with psycopg.connect(stack.s.pg_dsn) as conn:
        found = conn.execute("SELECT record_id, fire_id, channel, outcome, reason, message_id "
                             "FROM ledger WHERE kind = 'job' AND job_id = %s", (job_id,)).fetchall()
    names = ("record_id", "fire_id", "channel", "outcome", "reason", "message_id")
    return {row[2]: dict(zip(names, row, strict=True)) for row in found}


def decided(stack, client: httpx.Client, body: dict) -> tuple[str, dict[str, dict]]:
    created = client.post("/v1/jobs", json=body)
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    return job_id, wait_for(lambda: len(r := rows(stack, job_id)) == 2 and r, timeout_s=90)


def mails(stack, fire: str) -> list[dict]:
    return [m for m in ses_sent(stack, START["ses"]) if m["headers"].get(FIRE_ID_HEADER) == fire]


def texts(stack, fire: str) -> list[dict]:
    return [t for t in sms_sent(stack, START["sms"])
            if t["context"].get("cronstream-fire") == fire]


def test_a_reminder_on_both_channels_sends_each_once_as_its_own_entry(stack, client):
    job_id, found = decided(stack, client, job("+15551239001", "pat@example.net", "all"))
    sms, email = found["sms"], found["email"]
    fire = sms["fire_id"]
    assert (sms["record_id"], email["record_id"]) == (f"{fire}#sms", f"{fire}#email")
    assert (sms["outcome"], email["outcome"]) == ("succeeded", "succeeded"), found
    [text], [mail] = texts(stack, fire), mails(stack, fire)
    assert (text["to"], text["message_id"]) == ("+15551239001", sms["message_id"])
    assert (mail["to"], mail["message_id"]) == ("pat@example.net", email["message_id"])
    runs = client.get(f"/v1/jobs/{job_id}/runs", params={"limit": 1}).json()
    assert sorted(r["channel"] for r in runs["items"]) == ["email", "sms"], \
        "a page never splits a slot's channels"
    # docs/sql.md's texts beside emails finds them
    [query] = [q for q in re.findall(r"```sql\n(.*?)```", SQL_DOC.read_text(), re.S)
               if "channel" in q]
    with psycopg.connect(stack.s.pg_dsn) as conn:
        by_channel = conn.execute(query.replace(":'tenant'", "%s"), (client.tenant,)).fetchall()
    assert ("job", "email", "succeeded", 1) in by_channel
    assert ("job", "sms", "succeeded", 1) in by_channel


def test_a_fallback_emails_only_when_the_number_is_suppressed(stack, client):
    number = "+15551239002"
    assert client.post("/v1/suppressions", json={"phone": number}).status_code == 201
    job_id, found = decided(stack, client, job(number, "kim@example.net", "fallback"))
    fire = found["sms"]["fire_id"]
    assert (found["sms"]["outcome"], found["email"]["outcome"]) == ("suppressed", "succeeded")
    not_run = client.get(f"/v1/jobs/{job_id}/runs", params={"only": "not_run"}).json()["items"]
    assert [(r["channel"], r["outcome"]) for r in not_run] == [("sms", "suppressed")]
    assert texts(stack, fire) == [] and len(mails(stack, fire)) == 1

    job_id, found = decided(stack, client, job("+15551239003", "lee@example.net", "fallback"))
    fire = found["sms"]["fire_id"]
    assert (found["sms"]["outcome"], found["email"]["outcome"]) == ("succeeded", "not_run")
    assert found["email"]["reason"] == "fallback: not needed, the sms channel ended succeeded"
    assert len(texts(stack, fire)) == 1 and mails(stack, fire) == [], "the text went: no email"
    assert client.get(f"/v1/jobs/{job_id}/runs", params={"only": "not_run"}).json()["items"] == \
        [], "a reminder sent is not among the slots that did not run"
