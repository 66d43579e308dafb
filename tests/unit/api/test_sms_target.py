"""The ``sms`` target of a job (``api.models.SmsTarget``, in ``Target`` since the executor sends
texts: issue 45): each problem names its field under ``target`` (``target.to``,
``target.body``, ...), the origination must be one the operator granted the tenant
(``target.origination``), and the record's flat Avro fields round-trip to the same view."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from api.models import (
    JobIn,
    SmsTarget,
    job_record,
    job_view,
    sms_target_record,
    sms_target_view,
)
from streams.runtime.codec import codec
from tests.unit.api.conftest import Api

SMS = {"type": "sms", "to": "+1 (555) 123-4567", "body": "Dentist tomorrow at 9. Reply STOP to end",
       "origination": "+18005550100",
       "quiet_hours": {"start": "21:00", "end": "08:00", "timezone": "America/New_York"}}
SCHEDULE = {"cron": "0 9 * * *"}


def job_with(target: dict) -> JobIn:
    return JobIn.model_validate({"schedule": SCHEDULE, "target": target})


def problems(target: dict) -> list[tuple[tuple, str]]:
    with pytest.raises(ValidationError) as raised:
        job_with(target)
    return [(e["loc"], e["msg"]) for e in raised.value.errors()]


def test_a_valid_target_is_normalised():
    t = job_with(SMS).target
    assert isinstance(t, SmsTarget) and t.to == "+15551234567"
    assert t.quiet_hours is not None and t.quiet_hours.timezone == "America/New_York"
    assert SmsTarget(type="sms", to="+15551234567", body="hi").origination is None


@pytest.mark.parametrize(("change", "field", "fragment"), [
    ({"to": "5551234567"}, "to", "starts with + and its country code"),
    ({"to": "+0551234567"}, "to", "8 to 15 digits"),
    ({"body": "a" * 1531}, "body", "11 SMS parts in GSM-7"),
    ({"body": "😀" * 336}, "body", "UCS-2"),
    ({"body": "a" * 1601}, "body", "at most 1600 characters"),
    ({"body": "  "}, "body", "blank"),
    ({"origination": "Acme Dental Care"}, "origination", "origination must be"),
    ({"quiet_hours": {"start": "21:00", "end": "21:00", "timezone": "UTC"}}, "quiet_hours",
     "different"),
    ({"quiet_hours": {"start": "9pm", "end": "08:00", "timezone": "UTC"}}, "quiet_hours", "HH:MM"),
    ({"quiet_hours": {"start": "21:00", "end": "08:00", "timezone": "Moon/Base"}}, "quiet_hours",
     "IANA"),
    ({"sender": "x"}, "sender", "Extra inputs"),
])
def test_each_problem_names_its_field_under_target(change, field, fragment):
    found = problems({**SMS, **change})
    assert len(found) == 1, found
    loc, msg = found[0]
    assert loc == ("target", "sms", field) and fragment in msg, found


def granted(api: Api, *originations: str) -> dict[str, str]:
    return api.tenant("acme", sms_originations=list(originations) or ["+18005550100"])


def test_an_sms_job_is_accepted_stored_with_its_sms_fields_and_read_back(api: Api):
    headers = granted(api)
    answer = api.client.post("/v1/jobs", json={"schedule": SCHEDULE, "target": SMS},
                             headers=headers)
    assert answer.status_code == 201, answer.text
    created = answer.json()
    expected = {"type": "sms", "to": "+15551234567", "body": SMS["body"],
                "origination": "+18005550100", "quiet_hours": SMS["quiet_hours"]}
    assert created["target"] == expected
    [(topic, _, value)] = api.emitter.sent
    stored = codec().decode(value)["target"]
    assert (stored["type"], stored["sms_to"], stored["sms_origination"]) == (
        "sms", "+15551234567", "+18005550100")
    assert (stored["sms_quiet_start"], stored["sms_quiet_end"], stored["sms_quiet_timezone"]) == (
        "21:00", "08:00", "America/New_York")
    got = api.client.get(f"/v1/jobs/{created['id']}", headers=headers)
    assert got.status_code == 200 and got.json()["target"] == expected


@pytest.mark.parametrize(("change", "loc", "fragment"), [
    ({"to": "555-1234"}, ["body", "target", "sms", "to"], "E.164"),
    ({"body": "a" * 1531}, ["body", "target", "sms", "body"], "at most 10 parts (1530 characters"),
    ({"origination": "+18005550199"}, ["body", "target", "origination"],
     "not one of tenant acme's SMS originations"),
    ({"origination": None}, ["body", "target", "origination"], "account's default"),
])
def test_a_bad_sms_target_is_a_422_naming_its_field_and_nothing_is_written(api: Api, change, loc,
                                                                          fragment):
    headers = granted(api)
    answer = api.client.post("/v1/jobs", json={"schedule": SCHEDULE, "target": {**SMS, **change}},
                             headers=headers)
    assert answer.status_code == 422, answer.text
    found = [d for d in answer.json()["detail"] if d["loc"] == loc]
    assert found and fragment in found[0]["msg"], answer.json()
    assert api.emitter.sent == []


def test_the_accounts_default_origination_is_accepted_once_granted(api: Api):
    headers = granted(api, "account-default")
    target = {k: v for k, v in SMS.items() if k != "origination"}
    answer = api.client.post("/v1/jobs", json={"schedule": SCHEDULE, "target": target},
                             headers=headers)
    assert answer.status_code == 201, answer.text
    assert answer.json()["target"]["origination"] is None


def test_the_record_round_trips_through_the_job_schema_and_the_view():
    job = job_with(SMS)
    t = job.target
    assert isinstance(t, SmsTarget)
    record = job_record(job, job_id="acme/r", tenant="acme", revision=1, created_ms=1,
                        updated_ms=1, request_hash="h")
    assert record["target"] == {"type": "sms", **sms_target_record(t)}
    decoded = codec().decode(codec().encode("Job", record))
    assert decoded["target"]["sms_to"] == "+15551234567"
    assert decoded["target"]["email_to"] is None and decoded["target"]["url"] is None
    view = job_view(decoded, now_ms=2)["target"]
    assert view == sms_target_view(decoded["target"]) == {
        "type": "sms", "to": "+15551234567", "body": SMS["body"], "origination": "+18005550100",
        "quiet_hours": SMS["quiet_hours"]}
    assert job_with(view).target == t  # the view is a valid body again


def test_a_target_without_quiet_hours_views_them_as_null():
    t = SmsTarget(type="sms", to="+15551234567", body="hi")
    assert sms_target_view({"type": "sms", **sms_target_record(t)})["quiet_hours"] is None
