"""Reminder emails through boto3 → the local SES-compatible server: sent once per fire id,
throttling retried, and a send whose outcome is unknown never repeated."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from streams.execution.targets import FIRE_ID_HEADER
from tests.integration.helpers import ledger, ses_faults
from tests.integration.test_campaigns import ses_log_end, ses_sent
from tests.waiting import wait_for

# where the SES server's log ended when this module began: its tests read only what came after
# (a development checkout's log held 5.8M mails, and one poll of it outlasted the worker's SES
# timeout, so the hung send of the test below was already ``unknown`` when it was first seen)
LOG_START: dict[str, int] = {}


@pytest.fixture(autouse=True, scope="module")
def log_start(stack) -> None:
    LOG_START["at"] = ses_log_end(stack)


def mails(stack) -> list[dict]:
    """The mails the SES server accepted since this module began."""
    return ses_sent(stack, LOG_START["at"])


def sent(stack, fire: str) -> list[dict]:
    return [m for m in mails(stack) if m["headers"].get(FIRE_ID_HEADER) == fire]


def reminder(**extra) -> dict:
    at = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    return {"schedule": {"at": at}, "target": {
        "type": "email", "to": "ada@example.com", "from": "reminders@example.com",
        "subject": "Stand-up in 5 minutes", "text": "See you there."}, **extra}


def reminder_under_faults(stack, api, retry: dict, **faults: float) -> dict:
    """Schedule a reminder while the SES server misbehaves; its ledger row once decided."""
    with ses_faults(stack, **faults):
        job = api.post("/v1/jobs", json=reminder(retry=retry)).json()
        return wait_for(lambda: ledger(stack, job_id=job["id"]), timeout_s=60)[0]


def test_reminder_is_sent_once_with_its_message_id(stack, api):
    job = api.post("/v1/jobs", json=reminder()).json()
    row = wait_for(lambda: ledger(stack, job_id=job["id"]))[0]
    assert row["outcome"] == "succeeded", row
    mails = sent(stack, row["fire_id"])
    assert len(mails) == 1 and mails[0]["to"] == "ada@example.com"
    assert mails[0]["configuration_set"] == f"cronstream-{api.tenant}"
    runs = api.get(f"/v1/jobs/{job['id']}/runs").json()["items"]
    assert runs[0]["fire_id"] == row["fire_id"]


def test_throttling_is_retried_and_nothing_is_dropped(stack, api):
    row = reminder_under_faults(stack, api, {"max_attempts": 10, "initial_backoff_s": 0.5},
                                throttle_ratio=1.0, seconds=2)
    assert row["outcome"] == "succeeded" and row["attempts"] > 1, row
    assert len(sent(stack, row["fire_id"])) == 1


def test_a_send_that_timed_out_after_acceptance_is_unknown_and_not_retried(stack, api):
    """A timeout after SES accepted the mail may have sent it: ``unknown`` at its first attempt,
    never retried, whatever the retry policy allows."""
    row = reminder_under_faults(stack, api, {"max_attempts": 5, "initial_backoff_s": 0.2},
                                timeout_after_accept_ratio=1.0, timeout_s=15, seconds=20)
    assert row["outcome"] == "unknown" and row["attempts"] == 1, row
    assert len(sent(stack, row["fire_id"])) == 1, "accepted once and never sent again"


def test_a_send_with_unknown_outcome_is_not_repeated(stack, api):
    """At most once per reminder email: the intent goes into the done table before SES is
    called. SES accepts the mail and hangs its answer; the worker is SIGKILLed while the call
    hangs, and started again. It reads the slot's fired record again, finds the intent, and
    records the slot ``unknown`` without calling SES: the SES server's own log holds the mail
    once. (Without the intent the restarted worker sends it again: two lines.)"""
    from tests.integration.helpers import executor_caught_up, sigkill

    hang_s = 300  # outlasts the kill and the restart: the answer never comes
    with ses_faults(stack, timeout_after_accept_ratio=1.0, timeout_s=hang_s, seconds=hang_s):
        job = api.post("/v1/jobs", json=reminder(retry={"max_attempts": 5,
                                                        "initial_backoff_s": 0.2})).json()

        def hanging() -> list[dict]:
            return [m for m in mails(stack)
                    if m["headers"].get(FIRE_ID_HEADER, "").startswith(f"{job['id']}@")]

        fire = wait_for(hanging, timeout_s=60)[0]["headers"][FIRE_ID_HEADER]
        assert ledger(stack, job_id=job["id"]) == [], "recorded before its answer came"
        sigkill(stack, "worker-1")
        stack.start_worker("worker-1")
        # the slot recorded, or (the intent lost) the mail sent again: whichever comes first
        wait_for(lambda: ledger(stack, job_id=job["id"]) or len(sent(stack, fire)) > 1,
                 timeout_s=120)
        assert len(sent(stack, fire)) == 1, "sent again by the restarted worker"
        row = wait_for(lambda: ledger(stack, job_id=job["id"]), timeout_s=120)[0]
        wait_for(executor_caught_up(stack, [job["id"]]))
        assert len(sent(stack, fire)) == 1, "accepted once and never sent again"
    assert (row["fire_id"], row["outcome"], row["attempts"]) == (fire, "unknown", 0), row
    assert row["reason"].startswith("at-most-once: the send began before a crash"), row


def test_email_target_validation(api):
    bad = reminder()
    bad["target"]["to"] = "not-an-address"
    response = api.post("/v1/jobs", json=bad)
    assert response.status_code == 422 and "to" in response.text
    bad = reminder()
    del bad["target"]["text"]
    response = api.post("/v1/jobs", json=bad)
    assert response.status_code == 422 and "text or html" in response.text


def test_a_reminder_to_a_suppressed_address_is_not_sent(stack, api):
    """Item 6 of issue 30: reminder emails honour the tenant's suppressions (opt-outs, bounces,
    complaints) as campaigns do; the ledger says why nothing was sent."""
    job = reminder()
    job["target"]["to"] = "Grace@Example.com"
    assert api.post("/v1/suppressions", json={"email": "grace@example.com"}).status_code == 201
    created = api.post("/v1/jobs", json=job).json()
    row = wait_for(lambda: ledger(stack, job_id=created["id"]), timeout_s=60)[0]
    assert (row["outcome"], row["reason"]) == ("suppressed", "not sent: address suppressed"), row
    assert sent(stack, row["fire_id"]) == []
    assert api.delete("/v1/suppressions/grace@example.com").status_code == 204
    again = api.post("/v1/jobs", json=job).json()
    row = wait_for(lambda: ledger(stack, job_id=again["id"]), timeout_s=60)[0]
    assert row["outcome"] == "succeeded" and len(sent(stack, row["fire_id"])) == 1, row
