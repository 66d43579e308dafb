"""The SMS client (``streams.adapters.sms``): one SendTextMessage per call, never retried, and
every answer classified, driven through botocore's Stubber (no network)."""

from __future__ import annotations

import pytest
from botocore.exceptions import (
    ConnectionClosedError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)
from botocore.stub import Stubber

from streams.adapters import sms
from streams.adapters.sms import Outcome, SendResult


@pytest.fixture
def client(monkeypatch):
    # credentials from the environment: without them boto3's chain asks the instance metadata
    # endpoint as the client is made, and a unit test touches no network
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "unit")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "unit")
    return sms.client("http://sms.local", "us-east-1")


def test_the_client_never_retries_by_itself(client):
    assert client.meta.config.retries["total_max_attempts"] == 1
    assert client.meta.service_model.service_name == "pinpoint-sms-voice-v2"
    assert client.meta.endpoint_url == "http://sms.local"


def test_a_sent_text_carries_its_request_and_gives_its_message_id(client):
    with Stubber(client) as stub:
        stub.add_response("send_text_message", {"MessageId": "m-1"}, {
            "DestinationPhoneNumber": "+15551234567", "MessageBody": "Dentist at 9",
            "MessageType": "TRANSACTIONAL", "OriginationIdentity": "+18005550100",
            "ConfigurationSetName": "cronstream-acme",
            "Context": {"cronstream-tenant": "acme", "cronstream-fire": "j1@2026-01-01T09:00:00Z",
                        "cronstream-epoch": "4"}})
        result = sms.send_text(client, to="+15551234567", body="Dentist at 9",
                               origination="+18005550100", configuration_set="cronstream-acme",
                               context=sms.context("acme", "j1@2026-01-01T09:00:00Z", 4))
        stub.assert_no_pending_responses()
    assert result == SendResult(Outcome.SENT, message_id="m-1")


def test_optional_members_are_left_out(client):
    with Stubber(client) as stub:
        stub.add_response("send_text_message", {"MessageId": "m-2"}, {
            "DestinationPhoneNumber": "+15551234567", "MessageBody": "hi",
            "MessageType": "TRANSACTIONAL",
            "Context": {"cronstream-tenant": "acme", "cronstream-fire": "f"}})
        assert sms.send_text(client, to="+15551234567", body="hi", origination=None,
                             context=sms.context("acme", "f")).outcome is Outcome.SENT


@pytest.mark.parametrize(("code", "status", "fields", "outcome"), [
    ("ThrottlingException", 400, {}, Outcome.THROTTLED),
    ("ConflictException", 400, {"Reason": "DESTINATION_PHONE_NUMBER_OPTED_OUT"}, Outcome.OPTED_OUT),
    ("ConflictException", 400, {"Reason": "RESOURCE_NOT_ACTIVE"}, Outcome.PERMANENT),
    ("ValidationException", 400, {"Reason": "INVALID_IDENTITY_FOR_DESTINATION_COUNTRY"},
     Outcome.PERMANENT),
    ("AccessDeniedException", 400, {"Reason": "ACCOUNT_DISABLED"}, Outcome.PERMANENT),
    ("ResourceNotFoundException", 400, {}, Outcome.PERMANENT),
    ("ServiceQuotaExceededException", 400, {"Reason": "MONTHLY_SPEND_LIMIT_REACHED_FOR_TEXT"},
     Outcome.PERMANENT),
    ("InternalServerException", 500, {}, Outcome.TRANSIENT),
])
def test_each_error_of_the_model_is_classified(client, code, status, fields, outcome):
    with Stubber(client) as stub:
        stub.add_client_error("send_text_message", code, "no", http_status_code=status,
                              modeled_fields=fields)
        result = sms.send_text(client, to="+15551234567", body="hi", origination=None)
    assert result.outcome is outcome
    assert result.error is not None and result.error.startswith(code)
    if "Reason" in fields:
        assert f"({fields['Reason']})" in result.error


@pytest.mark.parametrize(("raised", "outcome"), [
    # the request went out and no answer came: the text may have left
    (ReadTimeoutError(endpoint_url="http://sms.local"), Outcome.UNKNOWN),
    (ConnectionClosedError(endpoint_url="http://sms.local"), Outcome.UNKNOWN),
    # no connection was made: nothing left
    (EndpointConnectionError(endpoint_url="http://sms.local"), Outcome.TRANSIENT),
    (NoCredentialsError(), Outcome.TRANSIENT),
])
def test_transport_failures_through_botocore(client, raised, outcome):
    calls = []

    def fail(**kwargs):
        calls.append(kwargs["request"].url)
        raise raised

    client.meta.events.register("before-send.pinpoint-sms-voice-v2.SendTextMessage", fail)
    assert sms.send_text(client, to="+15551234567", body="hi",
                         origination=None).outcome is outcome
    assert len(calls) == 1


def test_a_parameter_the_model_refuses_never_leaves(client):
    sent = []
    client.meta.events.register("before-send.pinpoint-sms-voice-v2.SendTextMessage",
                                lambda **kwargs: sent.append(kwargs))
    result = sms.send_text(client, to="+15551234567", body="hi", origination=None,
                           context={"k": ""})  # ContextValue is 1 to 800 characters
    assert result.outcome is Outcome.PERMANENT and "refused before sending" in str(result.error)
    assert sent == []


def test_refused_here_before_any_call(client):
    with Stubber(client) as stub:
        assert sms.send_text(client, to="+15551234567", body="hi", origination=None,
                             message_type="MARKETING").outcome is Outcome.PERMANENT
        assert sms.send_text(client, to="+15551234567", body="hi", origination=None,
                             context={str(i): "v" for i in range(6)}).outcome is Outcome.PERMANENT
        stub.assert_no_pending_responses()


def test_an_answer_without_a_message_id_is_unknown(client):
    with Stubber(client) as stub:
        stub.add_response("send_text_message", {})
        assert sms.send_text(client, to="+15551234567", body="hi",
                             origination=None).outcome is Outcome.UNKNOWN


def test_context_values_are_cut_to_what_aws_takes():
    assert sms.context("acme", "x" * 900) == {"cronstream-tenant": "acme",
                                              "cronstream-fire": "x" * 800}
