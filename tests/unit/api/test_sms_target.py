"""The ``sms`` target's validation (``api.models.SmsTarget``) and its flat Avro fields, ahead of
the executor: the API refuses an ``sms`` job today, and each problem of a target names its
field (``target.to``, ``target.body``, ...) once the target joins the union."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import BaseModel, Field, ValidationError

from api.models import (
    EmailTarget,
    JobIn,
    KafkaTarget,
    SmsTarget,
    WebhookTarget,
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


class WithSms(BaseModel):
    """A job's target with ``sms`` in the union, as the lead will declare it."""

    target: Annotated[WebhookTarget | KafkaTarget | EmailTarget | SmsTarget,
                      Field(discriminator="type")]


def problems(target: dict) -> list[tuple[tuple, str]]:
    with pytest.raises(ValidationError) as raised:
        WithSms(target=target)
    return [(e["loc"], e["msg"]) for e in raised.value.errors()]


def test_a_valid_target_is_normalised():
    t = WithSms(target=SMS).target
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


def test_an_sms_job_is_refused_until_the_executor_runs_one(api: Api):
    headers = api.tenant("acme")
    answer = api.client.post("/v1/jobs", json={"schedule": {"cron": "0 9 * * *"}, "target": SMS},
                             headers=headers)
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"][:2] == ["body", "target"]
    assert api.emitter.sent == []  # nothing written
    with pytest.raises(ValidationError):
        JobIn.model_validate({"schedule": {"cron": "0 9 * * *"}, "target": SMS})


def test_the_record_round_trips_through_the_job_schema_and_the_view():
    t = WithSms(target=SMS).target
    assert isinstance(t, SmsTarget)
    job = JobIn.model_construct(**{**JobIn.model_validate(
        {"schedule": {"cron": "0 9 * * *"}, "target": {"type": "kafka", "topic": "acme.t"}}
    ).__dict__, "target": t})
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
    assert WithSms(target=view).target == t  # the view is a valid body again


def test_a_target_without_quiet_hours_views_them_as_null():
    t = SmsTarget(type="sms", to="+15551234567", body="hi")
    assert sms_target_view({"type": "sms", **sms_target_record(t)})["quiet_hours"] is None
