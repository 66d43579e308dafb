"""Text reminders through boto3 → the local End User Messaging SMS server (issue 45): sent once
per fire id, throttling retried, a send whose outcome is unknown never repeated (a SIGKILL while
its answer hangs), a suppressed number recorded ``suppressed``, and an opt-out texted back
(STOP, through the SNS intake) honoured for the next text. Judged from the SMS server's own
log, not the ledger alone."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.conftest import make_client
from tests.integration.helpers import ledger, sms_faults, sms_log_end, sms_sent
from tests.waiting import wait_for

OURS = "+18005550100"  # the tenant's origination number (granted by the operator)
FIRE_CONTEXT = "cronstream-fire"
LOG_START: dict[str, int] = {}


@pytest.fixture(scope="module")
def texter(stack) -> Iterator[httpx.Client]:
    """A tenant granted the origination number ``OURS``."""
    LOG_START["at"] = sms_log_end(stack)
    with make_client(stack, sms_originations=[OURS]) as client:
        yield client


def texts(stack, fire: str) -> list[dict]:
    """The texts the SMS server accepted for one slot, since this module began."""
    return [t for t in sms_sent(stack, LOG_START["at"]) if t["context"].get(FIRE_CONTEXT) == fire]


def to(stack, number: str) -> list[dict]:
    return [t for t in sms_sent(stack, LOG_START["at"]) if t["to"] == number]


def reminder(number: str = "+15551230001", **extra) -> dict:
    at = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    return {"schedule": {"at": at}, "target": {
        "type": "sms", "to": number, "body": "Stand-up in 5 minutes", "origination": OURS},
        **extra}


def decided(stack, texter: httpx.Client, job: dict) -> dict:
    created = texter.post("/v1/jobs", json=job)
    assert created.status_code == 201, created.text
    return wait_for(lambda: ledger(stack, job_id=created.json()["id"]), timeout_s=90)[0]


def test_a_text_is_sent_once_with_its_message_id_and_read_back(stack, texter):
    row = decided(stack, texter, reminder("+15551230001"))
    assert row["outcome"] == "succeeded", row
    [text] = texts(stack, row["fire_id"])
    assert (text["to"], text["origination"], text["body"]) == (
        "+15551230001", OURS, "Stand-up in 5 minutes")
    assert text["context"]["cronstream-tenant"] == texter.tenant
    assert row["message_id"] == text["message_id"]
    job = texter.get(f"/v1/jobs/{row['job_id']}").json()
    assert job["target"]["type"] == "sms" and job["target"]["to"] == "+15551230001"


def test_throttling_is_retried_and_nothing_is_dropped(stack, texter):
    with sms_faults(stack, throttle_ratio=1.0, seconds=2):
        row = decided(stack, texter, reminder(
            "+15551230002", retry={"max_attempts": 10, "initial_backoff_s": 0.5}))
    assert row["outcome"] == "succeeded" and row["attempts"] > 1, row
    assert len(texts(stack, row["fire_id"])) == 1


def test_a_text_whose_answer_never_came_is_unknown_and_never_sent_again(stack, texter):
    """At most once per text: the intent is durable before the request. The server accepts the
    text and hangs its answer; the worker is SIGKILLed while it hangs and started again: it
    finds the intent and records ``unknown`` without a second request. (Without the intent the
    restarted worker texts again: two lines in the server's log.)"""
    from tests.integration.helpers import executor_caught_up, sigkill

    hang_s = 300
    with sms_faults(stack, timeout_after_accept_ratio=1.0, timeout_s=hang_s, seconds=hang_s):
        created = texter.post("/v1/jobs", json=reminder(
            "+15551230003", retry={"max_attempts": 5, "initial_backoff_s": 0.2})).json()

        def hanging() -> list[dict]:
            return [t for t in to(stack, "+15551230003")
                    if str(t["context"].get(FIRE_CONTEXT, "")).startswith(f"{created['id']}@")]

        fire = wait_for(hanging, timeout_s=60)[0]["context"][FIRE_CONTEXT]
        assert ledger(stack, job_id=created["id"]) == [], "recorded before its answer came"
        sigkill(stack, "worker-1")
        stack.start_worker("worker-1")
        wait_for(lambda: ledger(stack, job_id=created["id"]) or len(texts(stack, fire)) > 1,
                 timeout_s=120)
        assert len(texts(stack, fire)) == 1, "texted again by the restarted worker"
        row = wait_for(lambda: ledger(stack, job_id=created["id"]), timeout_s=120)[0]
        wait_for(executor_caught_up(stack, [created["id"]]))
        assert len(texts(stack, fire)) == 1, "accepted once and never sent again"
    assert (row["outcome"], row["attempts"]) == ("unknown", 0), row


def test_bad_numbers_and_bodies_are_422s_naming_the_field(texter):
    def refused(target_change: dict) -> tuple[list, str]:
        bad = reminder()
        bad["target"].update(target_change)
        answer = texter.post("/v1/jobs", json=bad)
        assert answer.status_code == 422, answer.text
        [problem] = answer.json()["detail"]
        return problem["loc"], problem["msg"]

    loc, msg = refused({"to": "555-1234"})
    assert (loc[1], loc[-1]) == ("target", "to") and "E.164" in msg, (loc, msg)
    loc, msg = refused({"body": "x" * 1_531})  # 10 GSM-7 parts hold 1,530
    assert (loc[1], loc[-1]) == ("target", "body") and "at most 10 parts" in msg, (loc, msg)
    loc, msg = refused({"origination": "+18005550199"})  # not granted to the tenant
    assert (loc[1], loc[-1]) == ("target", "origination"), (loc, msg)


def test_a_suppressed_number_is_recorded_suppressed_and_not_texted(stack, texter):
    number = "+15551230004"
    assert texter.post("/v1/suppressions", json={"phone": number}).status_code == 201
    row = decided(stack, texter, reminder(number))
    assert row["outcome"] == "suppressed", row
    assert to(stack, number) == []
    assert texter.delete(f"/v1/suppressions/{number}").status_code == 204
    row = decided(stack, texter, reminder(number))
    assert row["outcome"] == "succeeded" and len(to(stack, number)) == 1, row


def test_stop_texted_back_suppresses_the_number_before_the_next_text(stack, texter):
    """Two-way SMS: the recipient answers STOP to the tenant's number; the SMS server publishes
    it to the API's SNS subscription (signed, as SNS does); once the delivery is acknowledged
    the number is suppressed for the tenant and the next reminder to it is not sent. START
    lifts it. AWS's own opt-out list is off (self-managed), so only cronstream's suppression
    can have stopped the text."""
    number = "+15551230005"
    sms = stack.s.local_sms_endpoint
    httpx.post(f"{sms}/_local/opt-outs", json={"self_managed": True}, timeout=5).raise_for_status()
    subscribed = httpx.post(f"{sms}/_local/inbound-subscription", timeout=30,
                            json={"endpoint": f"{stack.s.api_url}/v1/feedback/sns"})
    subscribed.raise_for_status()
    try:
        assert subscribed.json().get("confirmed"), subscribed.text
        row = decided(stack, texter, reminder(number))
        assert row["outcome"] == "succeeded", row
        answer = httpx.post(f"{sms}/_local/inbound", timeout=30,
                            json={"from": number, "to": OURS, "body": "STOP"}).json()
        assert answer["published"] and answer["intent"] == "opt_out", answer
        # the delivery is SNS's, asynchronous: the suppression is there once it was answered
        got = wait_for(lambda: (r := texter.get(f"/v1/suppressions/{number}")).status_code == 200
                       and r.json(), timeout_s=60)
        assert (got["phone"], got["source"]) == (number, "sms_reply"), got
        row = decided(stack, texter, reminder(number))
        assert row["outcome"] == "suppressed" and len(to(stack, number)) == 1, row
        httpx.post(f"{sms}/_local/inbound", json={"from": number, "to": OURS, "body": "START"},
                   timeout=30).raise_for_status()
        wait_for(lambda: texter.get(f"/v1/suppressions/{number}").status_code == 404,
                 timeout_s=60)
    finally:
        httpx.post(f"{sms}/_local/inbound-subscription", json={"endpoint": None}, timeout=5)
        httpx.post(f"{sms}/_local/opt-outs", json={"self_managed": False}, timeout=5)


def test_a_number_on_awss_opt_out_list_is_suppressed_for_the_tenant_too(stack, texter):
    """AWS refuses a text to a number on the account's opt-out list (a STOP it handled itself):
    the run is ``suppressed`` and the tenant's suppressions learn the number (source
    ``sms_opted_out``), so ``GET /v1/suppressions`` shows why its texts stop."""
    number = "+15551230006"
    sms = stack.s.local_sms_endpoint
    httpx.post(f"{sms}/_local/opt-outs", json={"add": [number]}, timeout=5).raise_for_status()
    row = decided(stack, texter, reminder(number))
    assert (row["outcome"], row["reason"]) == ("suppressed", "not sent: number opted out"), row
    assert to(stack, number) == [], "refused by the server: never sent"
    got = wait_for(lambda: (r := texter.get(f"/v1/suppressions/{number}")).status_code == 200
                   and r.json(), timeout_s=60)
    assert got["source"] == "sms_opted_out" and "opt-out list" in got["reason"], got
