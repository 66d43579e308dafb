"""The ``sms`` target's attempt (``streams.execution.targets.send_text``): the tenant's grant, the
number's suppression and the region's lease checked in that order before anything is sent, and
every answer of SendTextMessage turned into what the executor records (issue 45). A fake client
object stands for boto3's: the classification itself is ``streams.adapters.sms``'s, tested
against botocore's Stubber in tests/unit/adapters/test_sms_client.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from streams.execution import reminder_opt_outs, targets
from streams.execution.targets import AT_MOST_ONCE, CallResult, send_text
from tests.unit.fakes import Lease

GRANTED = {"tenant": "acme", "senders": [], "pools": [], "sms_originations": ["+18005550100"]}
FIRED = {"tenant": "acme", "fire_id": "j1@2026-01-01T09:00:00Z", "job_id": "j1", "nominal_ms": 0,
         "target": {"type": "sms", "sms_to": "+15551234567", "sms_body": "Dentist at 9",
                    "sms_origination": "+18005550100"}}


class Client:
    """boto3's ``pinpoint-sms-voice-v2`` client as ``sms.send_text`` calls it: each call kept,
    answered with ``answer`` (raised when it is an exception)."""

    def __init__(self, answer: Any = None) -> None:
        self.answer = {"MessageId": "m-1"} if answer is None else answer
        self.requests: list[dict[str, Any]] = []

    def send_text_message(self, **request: Any) -> dict[str, Any]:
        self.requests.append(request)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class Refusing:
    def send_text_message(self, **request: Any) -> dict[str, Any]:
        raise AssertionError("sent")


class Lookup:
    def __init__(self, answer: Any = None) -> None:
        self.answer, self.asked = answer, []

    def of(self, tenant: str, to: str) -> dict[str, Any] | None:
        self.asked.append((tenant, to))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def client_error(code: str, status: int, reason: str | None = None) -> ClientError:
    response: dict[str, Any] = {"Error": {"Code": code, "Message": "m"},
                                "ResponseMetadata": {"HTTPStatusCode": status}}
    if reason:
        response["Reason"] = reason
    return ClientError(response, "SendTextMessage")


def with_target(**changes: Any) -> dict[str, Any]:
    return {**FIRED, "target": {**FIRED["target"], **changes}}


def test_a_sent_text_carries_its_tenant_fire_and_epoch_and_gives_its_message_id():
    client = Client()
    result = send_text(client, FIRED, GRANTED, Lease(epoch=4), Lookup())
    assert result == CallResult(True, None, None, message_id="m-1")
    [request] = client.requests
    assert request["DestinationPhoneNumber"] == "+15551234567"
    assert request["OriginationIdentity"] == "+18005550100"
    assert request["MessageBody"] == "Dentist at 9" and request["MessageType"] == "TRANSACTIONAL"
    assert request["Context"] == {"cronstream-tenant": "acme",
                                  "cronstream-fire": "j1@2026-01-01T09:00:00Z",
                                  "cronstream-epoch": "4"}


def test_a_tenant_not_read_yet_is_retried_and_sends_nothing():
    result = send_text(Refusing(), FIRED, None)
    assert not result.ok and not result.final and not result.unknown
    assert "not in the tenants view yet" in (result.error or "")


@pytest.mark.parametrize("tenant", [
    {**GRANTED, "sms_originations": ["+18005550199"]},  # another number
    {"tenant": "acme", "senders": [], "pools": []},  # a record from before the grants
])
def test_an_origination_not_granted_is_a_final_failure_before_anything_else(tenant):
    lookup = Lookup()
    result = send_text(Refusing(), FIRED, tenant, Lease(epoch=None), lookup)
    assert not result.ok and result.final and not result.suppressed and not result.lease_lost
    assert "not one of tenant acme's SMS originations" in (result.error or "")
    assert result.note == "not sent: origination not granted"
    assert lookup.asked == [], "refused before the suppressions are asked"


def test_the_accounts_default_origination_needs_its_own_grant():
    fired = with_target(sms_origination=None)
    assert send_text(Refusing(), fired, GRANTED).final
    client = Client()
    granted = {**GRANTED, "sms_originations": ["account-default"]}
    assert send_text(client, fired, granted).ok
    assert "OriginationIdentity" not in client.requests[0], "AWS picks"


def test_a_suppressed_number_is_recorded_suppressed_and_not_sent():
    lookup = Lookup({"reason": "STOP"})
    result = send_text(Refusing(), FIRED, GRANTED, Lease(epoch=None), lookup)
    assert not result.ok and result.final and result.suppressed and not result.unknown
    assert lookup.asked == [("acme", "+15551234567")], "keyed tenant:number, as E.164"
    assert "(STOP)" in (result.error or "") and result.note == "not sent: number suppressed"


def test_a_suppressions_view_behind_is_retried_and_sends_nothing():
    result = send_text(Refusing(), FIRED, GRANTED,
                       suppressions=Lookup(reminder_opt_outs.ViewBehind("behind")))
    assert not result.ok and not result.final and not result.suppressed


def test_the_lease_is_checked_last_and_a_lost_one_sends_nothing():
    lookup = Lookup()
    result = send_text(Refusing(), FIRED, GRANTED, Lease(epoch=None), lookup)
    assert result.lease_lost and not result.final and lookup.asked == [("acme", "+15551234567")]


def test_a_number_that_is_not_e164_is_never_sent():
    result = send_text(Refusing(), with_target(sms_to="5551234567"), GRANTED)
    assert not result.ok and result.final and "E.164" in (result.error or "")


@pytest.mark.parametrize(("answer", "final", "unknown", "suppressed", "throttled"), [
    (client_error("ThrottlingException", 400), False, False, False, True),
    (client_error("InternalServerException", 500), False, False, False, False),
    (EndpointConnectionError(endpoint_url="http://sms.local"), False, False, False, False),
    (client_error("ConflictException", 400, "DESTINATION_PHONE_NUMBER_OPTED_OUT"),
     True, False, True, False),
    (client_error("ValidationException", 400), True, False, False, False),
    (ReadTimeoutError(endpoint_url="http://sms.local"), True, True, False, False),
    ({"MessageId": ""}, True, True, False, False),  # accepted without an id: it may have left
])
def test_each_answer_becomes_what_the_executor_records(answer, final, unknown, suppressed,
                                                       throttled):
    result = send_text(Client(answer), FIRED, GRANTED)
    assert not result.ok and result.status_code is None
    assert (result.final, result.unknown, result.suppressed, result.throttled) == (
        final, unknown, suppressed, throttled), result


def test_an_opted_out_number_is_recorded_suppressed_with_awss_reason():
    from streams.execution.executor import outcome_of

    result = send_text(Client(client_error("ConflictException", 400,
                                           "DESTINATION_PHONE_NUMBER_OPTED_OUT")), FIRED, GRANTED)
    assert outcome_of(result) == "suppressed" and "OPTED_OUT" in (result.error or "")
    assert result.note == "not sent: number opted out"


def test_a_text_is_at_most_once_and_attempted_through_targets():
    assert "sms" in AT_MOST_ONCE, "the executor writes its intent before the first attempt"

    class Records:
        async def record(self, tenant: str) -> dict[str, Any]:
            return GRANTED

    made: list[Client] = []

    def sms_client() -> Client:
        made.append(Client())
        return made[-1]

    chosen = targets.Targets(fan_out=None, emitter=None, tenants=Records(),  # type: ignore[arg-type]
                             max_connections=1, resolver=None,  # type: ignore[arg-type]
                             ses_client=lambda: pytest.fail("an email client for a text"),
                             sms_client=sms_client)
    first = asyncio.run(chosen.attempt(FIRED))
    second = asyncio.run(chosen.attempt(FIRED))
    assert first.ok and second.ok and first.message_id == "m-1"
    assert len(made) == 1 and len(made[0].requests) == 2, "one client, made on first use"
    assert targets.host_of(FIRED["target"]) == "sms"


def test_a_number_on_awss_opt_out_list_joins_the_tenants_suppressions():
    """``Targets.opted_out``: AWS refused the text (the number is on its opt-out list), so the
    tenant's suppressions learn it through the one suppression path; a write that fails is
    logged and leaves the run ``suppressed``. A text refused for the tenant's own suppression
    writes nothing (it is there already)."""

    class Records:
        async def record(self, tenant: str) -> dict[str, Any]:
            return GRANTED

    written: list[tuple[str, str, str, str]] = []

    async def suppress(tenant: str, address: str, reason: str, source: str) -> None:
        written.append((tenant, address, reason, source))
        if address == "+15550000000":
            raise RuntimeError("broker refused")

    def chosen(answer: Any, lookup: Lookup | None = None) -> targets.Targets:
        return targets.Targets(fan_out=None, emitter=None, tenants=Records(),  # type: ignore[arg-type]
                               max_connections=1, resolver=None,  # type: ignore[arg-type]
                               ses_client=lambda: None, sms_client=lambda: Client(answer),
                               suppressions=lookup, suppress=suppress)

    opted_out = client_error("ConflictException", 400, "DESTINATION_PHONE_NUMBER_OPTED_OUT")
    result = asyncio.run(chosen(opted_out).attempt(FIRED))
    assert result.suppressed and result.opted_out
    [(tenant, number, reason, source)] = written
    assert (tenant, number, source) == ("acme", "+15551234567", "sms_opted_out")
    assert reason.startswith("AWS opt-out list: ") and "OPTED_OUT" in reason

    failing = {**FIRED, "target": {**FIRED["target"], "sms_to": "+15550000000"}}
    result = asyncio.run(chosen(opted_out).attempt(failing))
    assert result.suppressed and len(written) == 2, "the run's outcome stands"

    ours = asyncio.run(chosen(None, Lookup({"reason": "api"})).attempt(FIRED))
    assert ours.suppressed and not ours.opted_out and len(written) == 2
