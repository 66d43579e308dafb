"""The ``reminder`` target (``api.models.ReminderTarget``, issue 45 item 5): an email and a text
for each slot, in the order of preference; each problem is a 422 naming its channel's field,
each channel's identity must be granted, and the flat record round-trips to the same view. And
the runs' pages (``api.routes.jobs.runs_page``) never split a reminder's two entries."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from api.models import JobIn, ReminderTarget, job_record, job_view
from api.routes.jobs import runs_page
from streams.runtime.codec import codec
from tests.unit.api.conftest import Api

EMAIL = {"type": "email", "to": "pat@example.net", "from": "clinic@example.com",
         "subject": "Dentist tomorrow", "text": "At 9."}
SMS = {"type": "sms", "to": "+1 555 123 4567", "body": "Dentist tomorrow at 9",
       "origination": "+18005550100"}
REMINDER = {"type": "reminder", "channels": [SMS, EMAIL], "deliver": "fallback"}
SCHEDULE = {"cron": "0 9 * * *"}


def problems(target: dict) -> list[tuple[tuple, str]]:
    with pytest.raises(ValidationError) as raised:
        JobIn.model_validate({"schedule": SCHEDULE, "target": target})
    return [(e["loc"], e["msg"]) for e in raised.value.errors()]


@pytest.mark.parametrize(("target", "loc", "fragment"), [
    ({**REMINDER, "channels": [SMS]}, ("target", "reminder", "channels"), "at least 2"),
    ({**REMINDER, "channels": [EMAIL, EMAIL]}, ("target", "reminder"),
     "one email and one sms channel"),
    ({**REMINDER, "channels": [{**SMS, "to": "555-1234"}, EMAIL]},
     ("target", "reminder", "channels", 0, "sms", "to"), "E.164"),
    ({**REMINDER, "channels": [SMS, {**EMAIL, "to": "not an address"}]},
     ("target", "reminder", "channels", 1, "email", "to"), "email address"),
    ({**REMINDER, "channels": [SMS, {"type": "webhook", "url": "http://x"}]},
     ("target", "reminder", "channels", 1), "does not match any of the expected tags"),
    ({**REMINDER, "deliver": "first"}, ("target", "reminder", "deliver"), "'all' or 'fallback'"),
])
def test_each_problem_names_its_channels_field(target, loc, fragment):
    found = problems(target)
    assert len(found) == 1, found
    assert found[0][0] == loc and fragment in found[0][1], found


def test_the_record_round_trips_in_the_channels_order():
    job = JobIn.model_validate({"schedule": SCHEDULE, "target": REMINDER})
    assert isinstance(job.target, ReminderTarget)
    record = job_record(job, job_id="acme/r", tenant="acme", revision=1, created_ms=1,
                        updated_ms=1, request_hash="h")
    decoded = codec().decode(codec().encode("Job", record))["target"]
    assert (decoded["reminder_channels"], decoded["reminder_deliver"]) == (["sms", "email"],
                                                                           "fallback")
    assert (decoded["sms_to"], decoded["email_to"]) == ("+15551234567", "pat@example.net")
    view = job_view(codec().decode(codec().encode("Job", record)), now_ms=2)["target"]
    assert [c["type"] for c in view["channels"]] == ["sms", "email"]
    assert view["channels"][0]["to"] == "+15551234567" and view["deliver"] == "fallback"
    assert JobIn.model_validate({"schedule": SCHEDULE, "target": view}).target == job.target


def test_a_reminder_is_accepted_only_with_both_identities_granted(api: Api):
    refused = api.tenant("acme", senders=["example.com"])  # no SMS origination granted
    answer = api.client.post("/v1/jobs", json={"schedule": SCHEDULE, "target": REMINDER},
                             headers=refused)
    assert answer.status_code == 422, answer.text
    [detail] = answer.json()["detail"]
    assert detail["loc"] == ["body", "target", "channels", "0", "origination"]
    assert "SMS originations" in detail["msg"] and api.emitter.sent == []

    refused = api.tenant("beta", senders=["example.org"], sms_originations=["+18005550100"])
    answer = api.client.post("/v1/jobs", json={"schedule": SCHEDULE, "target": REMINDER},
                             headers=refused)
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "target", "channels", "1", "from"]

    granted = api.tenant("gamma", senders=["example.com"], sms_originations=["+18005550100"])
    answer = api.client.post("/v1/jobs", json={"schedule": SCHEDULE, "target": REMINDER},
                             headers=granted)
    assert answer.status_code == 201, answer.text
    assert answer.json()["target"]["channels"][1]["to"] == "pat@example.net"


def row(at: str, channel: str) -> dict[str, str]:
    return {"nominal_time": f"2026-11-30T09:00:0{at}Z", "channel": channel}


def test_a_page_ends_at_a_slots_last_row():
    rows = [row("3", "email"), row("3", "sms"), row("2", "email"), row("2", "sms"),
            row("1", "email")]
    page, cursor = runs_page(rows, 3)  # read with limit + SLOT_ROWS
    assert page == rows[:2], "slot 2's second channel would have been lost"
    assert cursor == 1_796_029_203_000
    assert runs_page(rows[2:], 5) == (rows[2:], None)
    page, cursor = runs_page(rows[:4], 1)  # one slot longer than the page: the slot alone
    assert page == rows[:2] and cursor == 1_796_029_203_000
    three = [row("3", "reminder"), row("3", "email"), row("3", "sms"), row("2", "email")]
    assert runs_page(three, 1)[0] == three[:3], "every row of the slot, read past the limit"
