"""The local SMS server (``stack/sms_server.py``) over real HTTP on loopback, driven by boto3 as
the workers will drive it (``streams.adapters.sms``), and its inbound texts delivered to an SNS
subscriber as SNS delivers them: the wire the unit tests (tests/unit/stack/test_sms_server.py)
bridge in process. Needs no stack: each test starts the servers it uses on free ports, in
threads of its own."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from stack.sms_server import create_app
from streams.adapters import sms, sms_inbound, sns
from streams.adapters.sms import Outcome
from tests.conftest import free_port

TO, OURS = "+15551234567", "+18005550100"


class Served:
    """An ASGI app served by uvicorn on a loopback port, in a thread, until ``close``."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                    log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, name=f"served-{self.port}",
                                       daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "the server did not start in 10 s"
            time.sleep(0.02)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def sms_server(tmp_path) -> Iterator[tuple[Served, Path]]:
    log = tmp_path / "sms" / "sent.jsonl"
    served = Served(create_app(log))
    yield served, log
    served.close()


@pytest.fixture
def client(sms_server, monkeypatch) -> Any:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")
    return sms.client(sms_server[0].url, "us-east-1", timeout_s=1.0)


def local(served: Served, path: str, body: dict | None = None) -> dict:
    with httpx.Client(base_url=served.url, timeout=10) as http:
        answer = http.post(path, json=body) if body is not None else http.get(path)
    assert answer.status_code == 200, answer.text
    return answer.json()


def send(client: Any, body: str = "Dentist tomorrow at 9") -> sms.SendResult:
    return sms.send_text(client, to=TO, body=body, origination=OURS,
                         context=sms.context("acme", "j1@2026-06-10T13:00:00.000Z", 3))


def test_boto3_over_http_sent_throttled_and_opted_out(sms_server, client):
    served, log = sms_server
    first = send(client)
    assert first.outcome is Outcome.SENT and first.message_id
    line = json.loads(log.read_text().splitlines()[0])
    assert line["message_id"] == first.message_id and line["to"] == TO and line["epoch"] == 3
    assert line["context"]["cronstream-fire"] == "j1@2026-06-10T13:00:00.000Z"

    local(served, "/_local/faults", {"throttle_ratio": 1.0})
    throttled = send(client)
    assert throttled.outcome is Outcome.THROTTLED and "ThrottlingException" in str(throttled.error)
    local(served, "/_local/faults", {})

    local(served, "/_local/inbound", {"from": TO, "to": OURS, "body": "STOP"})
    refused = send(client)
    assert refused.outcome is Outcome.OPTED_OUT
    assert len(log.read_text().splitlines()) == 1
    stats = local(served, "/_local/stats")
    assert (stats["sent"], stats["throttled"], stats["opted_out"]) == (1, 1, 1)


def test_a_timeout_after_accept_is_unknown_and_the_text_was_sent(sms_server, client):
    """The case the intent → send → outcome protocol exists for: the server took the text and
    the client heard nothing back; the adapter says unknown, never sent or failed."""
    served, log = sms_server
    local(served, "/_local/faults", {"timeout_after_accept_ratio": 1.0, "timeout_s": 3})
    result = send(client)  # the client's read timeout is 1 s
    assert result.outcome is Outcome.UNKNOWN
    assert len(log.read_text().splitlines()) == 1
    assert local(served, "/_local/stats")["timeouts"] == 1


def test_an_unreachable_endpoint_is_transient(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")
    nothing = sms.client(f"http://127.0.0.1:{free_port()}", "us-east-1", timeout_s=1.0)
    assert send(nothing).outcome is Outcome.TRANSIENT


class Subscriber:
    """An SNS HTTP endpoint: confirms its subscription by fetching the SubscribeURL (as the
    API's intake does) and keeps every notification."""

    def __init__(self) -> None:
        self.messages: list[dict[str, str]] = []

    async def receive(self, request: Request) -> Response:
        message = sns.parse(await request.body())
        if message["Type"] == "SubscriptionConfirmation":
            async with httpx.AsyncClient(timeout=10) as http:
                assert (await http.get(message["SubscribeURL"])).status_code == 200
        else:
            self.messages.append(message)
        return Response(status_code=200)


def test_an_inbound_stop_reaches_the_subscriber_signed_as_sns_signs(sms_server):
    served, log = sms_server
    subscriber = Subscriber()
    endpoint = Served(Starlette(routes=[Route("/sns", subscriber.receive, methods=["POST"])]))
    try:
        answer = local(served, "/_local/inbound-subscription", {"endpoint": endpoint.url + "/sns"})
        assert answer["confirmation_answer"] == 200 and answer["confirmed"] is True
        sent = local(served, "/_local/inbound", {"from": TO, "to": OURS, "body": "stop please"})
        assert sent["published"] is True and sent["intent"] == "opt_out"
        deadline = time.monotonic() + 10
        while not subscriber.messages:
            assert time.monotonic() < deadline, "no notification in 10 s"
            time.sleep(0.05)
    finally:
        endpoint.close()
    message = subscriber.messages[0]
    with httpx.Client(timeout=10) as http:
        cert = http.get(message["SigningCertURL"]).content
    sns.verify(message, sns.public_key(cert, sns.timestamp_s(message)))
    inbound = sms_inbound.parse(message["Message"])
    assert (inbound.sender, inbound.number, inbound.body) == (TO, OURS, "stop please")
    assert inbound.inbound_message_id == sent["inbound_message_id"]
    assert sms_inbound.intent(inbound.body) is sms_inbound.Intent.OPT_OUT
    deadline = time.monotonic() + 5
    inbound_log = log.with_name("inbound.jsonl")
    while not (inbound_log.exists() and inbound_log.read_text()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    logged = json.loads(inbound_log.read_text().splitlines()[0])
    assert logged["answer"] == 200 and logged["intent"] == "opt_out"


def test_the_stacks_one_server_takes_mail_at_its_root_and_texts_under_sms(tmp_path, monkeypatch):
    """``stack/messaging_server.py``: what ``stack up`` runs on the SES port. boto3 reaches the
    SMS server at the endpoint ``…/sms`` (it posts to that path itself, without a slash) and its
    ``_local`` routes are under it; the SES server's stay at the root."""
    from stack import messaging_server

    monkeypatch.setenv("CRONSTREAM_SES_LOG", str(tmp_path / "ses" / "sent.jsonl"))
    monkeypatch.setenv("CRONSTREAM_SMS_LOG", str(tmp_path / "sms" / "sent.jsonl"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")
    served = Served(messaging_server.create_app())
    try:
        client = sms.client(f"{served.url}/sms", "us-east-1")
        sent = sms.send_text(client, to=TO, body="Your reminder", origination=OURS,
                             context=sms.context("t1", "job-1@2026-11-29T09:00:00Z"))
        assert sent.outcome is Outcome.SENT, sent
        assert httpx.get(f"{served.url}/sms/_local/stats", timeout=5).json()["sent"] == 1
        assert "recipients" in httpx.get(f"{served.url}/_local/stats", timeout=5).json()
        logged = [json.loads(line) for line in (tmp_path / "sms" / "sent.jsonl").read_text()
                  .splitlines()]
        assert [(t["to"], t["message_id"]) for t in logged] == [(TO, sent.message_id)]
    finally:
        served.close()
