"""The local SMS server (``stack.sms_server``): AWS End User Messaging SMS's JSON 1.0 wire
protocol as boto3 speaks it, its faults, the region fence, the opt-out list and inbound texts.

boto3 is driven against the app in process: a ``before-send`` hook hands botocore's signed
request to starlette's TestClient (ASGI, no socket) and its answer back to botocore's parser,
so these tests see exactly the codes, reasons and ids a client of the real service would. The
same over HTTP on a loopback port is tests/integration/test_sms_server.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from botocore.awsrequest import AWSResponse, HeadersDict
from botocore.exceptions import ClientError
from starlette.testclient import TestClient

from stack.sms_server import CONTENT_TYPE, INBOUND_TOPIC_ARN, create_app
from stack.sns_publisher import CERT_PATH, CONFIRM_PATH, Publisher
from streams.adapters import sms, sms_inbound, sns
from streams.adapters.sms import Outcome

TO, OURS = "+15551234567", "+18005550100"


class _Raw:
    """What botocore reads an answer's body from."""

    def __init__(self, content: bytes) -> None:
        self.content = content

    def stream(self, **_: Any) -> Any:
        yield self.content


def boto3_client(app, monkeypatch) -> Any:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "unit")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "unit")
    client = sms.client("http://sms.local", "us-east-1")
    http = TestClient(app)

    def send(request: Any, **_: Any) -> AWSResponse:
        headers = {k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()}
        answer = http.request(request.method, request.url, content=request.body, headers=headers)
        return AWSResponse(request.url, answer.status_code, HeadersDict(answer.headers),
                           _Raw(answer.content))

    client.meta.events.register("before-send.pinpoint-sms-voice-v2", send)
    return client


@pytest.fixture
def app(tmp_path):
    return create_app(tmp_path / "sms" / "sent.jsonl")


def sent(app) -> list[dict]:
    path = app.state.server.log_path
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def text(client, body: str = "Dentist tomorrow at 9", to: str = TO, **context: str) -> Any:
    return sms.send_text(client, to=to, body=body, origination=OURS,
                         context={**sms.context("acme", "j1@2026-06-10T13:00:00.000Z"), **context})


def test_boto3_sends_a_text_and_the_log_records_it_with_its_context(app, monkeypatch):
    client = boto3_client(app, monkeypatch)
    first, second = text(client), text(client, body="Ça va? ✓")
    assert first.outcome is Outcome.SENT and second.outcome is Outcome.SENT
    assert first.message_id != second.message_id
    lines = sent(app)
    assert [line["message_id"] for line in lines] == [first.message_id, second.message_id]
    assert lines[0]["to"] == TO and lines[0]["origination"] == OURS
    assert lines[0]["body"] == "Dentist tomorrow at 9"
    assert lines[0]["message_type"] == "TRANSACTIONAL"
    assert lines[0]["context"] == {"cronstream-tenant": "acme",
                                   "cronstream-fire": "j1@2026-06-10T13:00:00.000Z"}
    assert (lines[0]["encoding"], lines[0]["parts"]) == ("GSM-7", 1)
    assert lines[1]["encoding"] == "UCS-2"
    assert app.state.server.stats["sent"] == 2 and app.state.server.stats["parts"] == 2


def test_the_wire_shapes_of_an_answer_and_an_error(app):
    http = TestClient(app)
    headers = {"X-Amz-Target": "PinpointSMSVoiceV2.SendTextMessage", "Content-Type": CONTENT_TYPE}
    ok = http.post("/", content=json.dumps({"DestinationPhoneNumber": TO, "MessageBody": "hi"}),
                   headers=headers)
    assert ok.status_code == 200 and ok.headers["content-type"].startswith(CONTENT_TYPE)
    assert set(ok.json()) == {"MessageId"} and "x-amzn-requestid" in ok.headers
    bad = http.post("/", content=json.dumps({"DestinationPhoneNumber": "555-1234",
                                             "MessageBody": "hi"}), headers=headers)
    assert bad.status_code == 400
    assert bad.json()["__type"] == "ValidationException"
    assert bad.json()["Reason"] == "FIELD_VALIDATION_FAILED"
    assert bad.json()["Fields"][0]["Name"] == "DestinationPhoneNumber"
    unknown = http.post("/", content="{}", headers={**headers,
                                                    "X-Amz-Target": "PinpointSMSVoiceV2.SendVoiceMessage"})
    assert unknown.status_code == 400 and unknown.json()["__type"] == "UnknownOperationException"


def test_throttling_is_a_throttling_exception_that_botocore_names(app, monkeypatch):
    client = boto3_client(app, monkeypatch)
    TestClient(app).post("/_local/faults", json={"throttle_ratio": 1.0})
    with pytest.raises(ClientError) as raised:
        client.send_text_message(DestinationPhoneNumber=TO, MessageBody="hi")
    assert raised.value.response["Error"]["Code"] == "ThrottlingException"
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert text(client).outcome is Outcome.THROTTLED
    assert sent(app) == [] and app.state.server.stats["throttled"] == 2
    TestClient(app).post("/_local/faults", json={})
    assert text(client).outcome is Outcome.SENT


def test_the_rate_counts_message_parts_as_aws_mps_does(app, monkeypatch):
    client = boto3_client(app, monkeypatch)
    TestClient(app).post("/_local/faults", json={"max_rate_per_s": 3})
    assert text(client, body="a" * 200).outcome is Outcome.SENT  # 2 parts
    assert text(client, body="a" * 200).outcome is Outcome.THROTTLED  # 2 more: 4 > 3
    assert text(client, body="a").outcome is Outcome.SENT  # 1 more: 3


def test_a_model_violation_is_a_validation_exception_with_its_reason(app, monkeypatch):
    client = boto3_client(app, monkeypatch)
    with pytest.raises(ClientError) as raised:
        # botocore's own check would refuse it first: the server is asked directly
        client.meta.config.parameter_validation = False
        client.send_text_message(DestinationPhoneNumber=TO, MessageBody="a" * 1601)
    assert raised.value.response["Error"]["Code"] == "ValidationException"
    assert raised.value.response["Reason"] == "MAXIMUM_SIZE_EXCEEDED"
    assert raised.value.response["Fields"] == [{"Name": "MessageBody", "Message":
                                                "MessageBody is 1601 characters, at most 1600"}]


def test_a_timeout_after_accept_logs_the_text_then_answers_late(app, monkeypatch):
    client = boto3_client(app, monkeypatch)
    TestClient(app).post("/_local/faults", json={"timeout_after_accept_ratio": 1.0,
                                                 "timeout_s": 0.01})
    assert text(client).outcome is Outcome.SENT  # 0.01 s is inside the client's timeout
    assert len(sent(app)) == 1 and app.state.server.stats["timeouts"] == 1


def test_a_fault_that_is_not_a_number_is_refused_naming_it(app):
    http = TestClient(app)
    answer = http.post("/_local/faults", json={"throttle_ratio": "lots"})
    assert answer.status_code == 400 and "throttle_ratio" in answer.json()["message"]


def test_a_text_under_an_older_region_epoch_is_refused_and_not_logged(app, monkeypatch):
    client = boto3_client(app, monkeypatch)
    assert text(client, **{"cronstream-epoch": "5"}).outcome is Outcome.SENT
    stale = text(client, **{"cronstream-epoch": "4"})
    assert stale.outcome is Outcome.PERMANENT and "AccessDeniedException" in str(stale.error)
    assert [line["epoch"] for line in sent(app)] == [5]
    assert app.state.server.stats["stale_epoch"] == 1


def test_stop_puts_the_number_on_the_opt_out_list_and_start_takes_it_off(app, monkeypatch):
    client = boto3_client(app, monkeypatch)
    http = TestClient(app)
    answer = http.post("/_local/inbound", json={"from": "+1 555 123 4567", "to": OURS,
                                                "body": "Stop"}).json()
    assert answer["intent"] == "opt_out" and answer["opted_out"] is True
    assert answer["published"] is False  # no subscriber
    refused = text(client)
    assert refused.outcome is Outcome.OPTED_OUT
    assert "DESTINATION_PHONE_NUMBER_OPTED_OUT" in str(refused.error)
    assert http.get("/_local/opt-outs").json() == {"self_managed": False, "numbers": [TO]}
    http.post("/_local/inbound", json={"from": TO, "to": OURS, "body": "START"})
    assert text(client).outcome is Outcome.SENT
    assert app.state.server.stats["opted_out"] == 1 and app.state.server.stats["inbound"] == 2


def test_self_managed_opt_outs_leave_stopping_to_cronstream(app, monkeypatch):
    client = boto3_client(app, monkeypatch)
    http = TestClient(app)
    http.post("/_local/opt-outs", json={"self_managed": True})
    http.post("/_local/inbound", json={"from": TO, "to": OURS, "body": "STOP"})
    assert http.get("/_local/opt-outs").json()["numbers"] == []
    assert text(client).outcome is Outcome.SENT


def test_an_inbound_with_a_bad_number_is_refused(app):
    http = TestClient(app)
    answer = http.post("/_local/inbound", json={"from": "5551234567", "to": OURS, "body": "STOP"})
    assert answer.status_code == 400 and "E.164" in answer.json()["message"]


def test_an_inbound_text_is_published_as_a_signed_sns_notification_of_awss_payload(tmp_path):
    """Nothing is delivered here (no socket): the subscription is confirmed through the
    server's SubscribeURL route and the queued message read before its task runs."""
    app = create_app(tmp_path / "sent.jsonl")
    server = app.state.server

    async def run() -> tuple[dict[str, str], dict, int]:
        server.inbound_publisher = Publisher("http://sms.local", {
            "endpoint": "http://127.0.0.1:9/v1/feedback/sns", "topic_arn": INBOUND_TOPIC_ARN},
            server.inbound_log)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sms.local") as http:
            confirmed = await http.get(CONFIRM_PATH, params={
                "Token": server.inbound_publisher.token})
            answer = (await http.post("/_local/inbound", json={
                "from": TO, "to": OURS, "body": "STOP", "previous_message_id": "m-9"})).json()
            cert = await http.get(CERT_PATH)
        assert cert.content == Publisher.identity()[1]
        queued = [m for _, _, m, first in sorted(server.inbound_publisher._due) if first]
        await server.inbound_publisher.close()
        assert len(queued) == 1
        return queued[0], answer, confirmed.status_code

    message, answer, confirmed = asyncio.run(run())
    assert confirmed == 200 and answer["published"] is True
    parsed = sns.parse(json.dumps(message).encode())
    assert parsed["Type"] == "Notification" and parsed["TopicArn"] == INBOUND_TOPIC_ARN
    assert "Subject" not in parsed and parsed["UnsubscribeURL"]
    sns.verify(parsed, sns.public_key(Publisher.identity()[1], sns.timestamp_s(parsed)))
    inbound = sms_inbound.parse(parsed["Message"])
    assert (inbound.sender, inbound.number, inbound.body) == (TO, OURS, "STOP")
    assert inbound.inbound_message_id == answer["inbound_message_id"]
    assert inbound.previous_published_message_id == "m-9"
    assert sms_inbound.intent(inbound.body) is sms_inbound.Intent.OPT_OUT
