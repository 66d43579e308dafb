"""The SES client encodes its send requests itself (``streams.adapters.ses._take_params``): what goes on
the wire must be byte for byte what botocore's own REST-JSON serialiser writes, signed over the
same payload. Each request is captured at ``before-send`` (after signing) and never sent."""

import datetime

import boto3
import botocore.auth
import pytest
from botocore.config import Config

from streams.adapters import ses


class Captured(Exception):
    def __init__(self, request) -> None:
        self.request = request


def _capture(request, **_) -> None:
    raise Captured(request)


def _wire(client, operation: str, params: dict) -> tuple[bytes, dict[str, str]]:
    client.meta.events.register(f"before-send.sesv2.{operation}", _capture)
    with pytest.raises(Captured) as captured:
        getattr(client, {"SendBulkEmail": "send_bulk_email", "SendEmail": "send_email"}[operation])(
            **params)
    request = captured.value.request
    return request.body, dict(request.headers)


def _plain_botocore():
    return boto3.client("sesv2", endpoint_url="http://127.0.0.1:1", region_name="us-east-1",
                        config=Config(parameter_validation=False))


BULK = {
    "FromEmailAddress": "Nöel <news@example.com>",
    "DefaultContent": {"Template": {
        "TemplateContent": {"Subject": "Grüße {{name}}", "Text": "hi\n\"{{name}}\"",
                            "Html": "<p>{{name}}</p>"},
        "TemplateData": "{}",
        "Headers": [{"Name": "List-Unsubscribe-Post", "Value": "List-Unsubscribe=One-Click"}]}},
    "BulkEmailEntries": [{
        "Destination": {"ToAddresses": [f"r{i}@example.net"]},
        "ReplacementHeaders": [{"Name": "List-Unsubscribe", "Value": f"<https://u/{i}>"}],
        "ReplacementEmailContent": {"ReplacementTemplate": {
            "ReplacementTemplateData": '{"name": "R\\u00e9' + str(i) + '"}'}},
    } for i in range(50)],
    "ConfigurationSetName": "cronstream-acme-default",
    "DefaultEmailTags": [{"Name": "cronstream-campaign", "Value": "c-1"},
                         {"Name": "cronstream-chunk", "Value": "ab12-7"}],
}
ONE = {
    "FromEmailAddress": "a@example.com", "Destination": {"ToAddresses": ["b@example.net"]},
    "Content": {"Simple": {"Subject": {"Data": "s", "Charset": "UTF-8"},
                           "Body": {"Text": {"Data": "t", "Charset": "UTF-8"}},
                           "Headers": [{"Name": "X-A", "Value": "1"}]}},
    "EmailTags": [{"Name": "cronstream-fire", "Value": "j-1_2026-11-26T00_00_00Z"}],
}


@pytest.mark.parametrize(("operation", "params"), [("SendBulkEmail", BULK), ("SendEmail", ONE)])
def test_the_send_requests_are_the_bytes_botocore_would_write(monkeypatch, operation, params):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    at = datetime.datetime(2026, 11, 23, 12, 0, 0)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: at)
    ours_body, ours_headers = _wire(ses.client("http://127.0.0.1:1", "us-east-1"), operation, params)
    theirs_body, theirs_headers = _wire(_plain_botocore(), operation, params)
    assert ours_body == theirs_body
    assert ours_headers["Content-Type"] == theirs_headers["Content-Type"] == b"application/json"
    # SigV4 signs the payload's hash: the same signature means botocore signed the body it sends
    assert b"Signature=" in ours_headers["Authorization"]
    assert ours_headers["Authorization"] == theirs_headers["Authorization"]


def test_the_client_walks_no_shape_for_a_send(monkeypatch):
    """The point of encoding the body here: botocore's serialiser gets nothing to walk."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    client = ses.client(None, "us-east-1")
    walked: list[object] = []
    serializer = client._serializer
    original = serializer._serialize
    monkeypatch.setattr(serializer, "_serialize", lambda *a: walked.append(a) or original(*a))
    _wire(client, "SendBulkEmail", BULK)
    assert walked == []


def test_the_user_agent_is_the_fixed_one(monkeypatch):
    """botocore rebuilds its own User-Agent twice per call unless one is configured; the client
    sends ``ses.USER_AGENT`` (SigV4 does not sign it, so the signature test above still holds)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    _, headers = _wire(ses.client(None, "us-east-1"), "SendBulkEmail", BULK)
    assert headers["User-Agent"].startswith(ses.USER_AGENT.encode() + b" ")
    assert b"ua/2.1" not in headers["User-Agent"]  # the mark of the string botocore builds
