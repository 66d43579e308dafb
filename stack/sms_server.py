"""A local server of AWS End User Messaging SMS's API (``pinpoint-sms-voice-v2``, the subset
cronstream uses), for tests, the demo and benchmarks: boto3 reaches it through ``endpoint_url``
exactly as it would reach AWS (issue 45). The sibling of ``stack/ses_server.py``.

- The wire protocol is AWS JSON 1.0, as botocore's service model says (``protocol: json``,
  ``jsonVersion: 1.0``, ``targetPrefix: PinpointSMSVoiceV2``): every call is ``POST /`` with
  ``X-Amz-Target: PinpointSMSVoiceV2.<Operation>`` and a JSON body of the input shape; an answer
  is the output shape as JSON, an error is HTTP 400 (500 for the service's own faults) with
  ``{"__type": "<Code>", "Message": ..., "Reason": ...}``, from which botocore raises
  ``ClientError`` with that code and the modeled ``Reason`` beside it.
- ``SendTextMessage`` checks the request as the model does (DestinationPhoneNumber,
  OriginationIdentity, MessageBody up to 1,600 characters, MessageType, a Context of up to 5
  entries; ``ValidationException`` otherwise), answers a ``MessageId`` and appends one JSON
  line per accepted text to ``sent.jsonl`` (the path given, ``Settings.sms_log``): the server's
  own record, which checkers compare with the ledger. Each line carries the text's Context
  (cronstream's tenant, fire id and epoch) and its encoding and message parts.
- ``POST /_local/faults`` injects trouble, with the SES server's fields and meaning
  (``stack.ses_server.Faults``): ``throttle_ratio`` (that share of calls answers
  ``ThrottlingException``), ``timeout_after_accept_ratio`` (accepted and logged, then the answer
  is delayed past the client's timeout), ``max_rate_per_s`` (message parts per second, AWS's MPS,
  before throttling), ``latency_ms``, for ``seconds`` (0 = until reset).
- ``GET /_local/stats`` counts calls, texts sent, parts, throttles, timeouts, refusals.
- A text whose Context carries ``cronstream-epoch`` older than one already seen is refused
  (``AccessDeniedException``, counted ``stale_epoch``): the region fence, checked as a
  fencing-aware receiver would (AWS does not).
- The opt-out list: as AWS does by default, an inbound opt-out keyword puts the sender on the
  account's opt-out list and a later text to it is refused (``ConflictException``, reason
  ``DESTINATION_PHONE_NUMBER_OPTED_OUT``, counted ``opted_out``); START/UNSTOP takes it off.
  ``POST /_local/opt-outs`` ``{"self_managed": true}`` turns that off (AWS's self-managed
  opt-outs), so a test sees whether cronstream's own suppression stopped the text, not AWS's;
  ``GET /_local/opt-outs`` lists the numbers.
- Two-way SMS: ``POST /_local/inbound-subscription`` ``{"endpoint": URL}`` subscribes an SNS
  HTTP(S) endpoint (confirmation handshake, signing, delays and duplicates:
  ``stack.sns_publisher.Publisher``); ``POST /_local/inbound`` ``{"from": "+1555...", "to":
  "+1800...", "body": "STOP"}`` is a text from a phone to one of our numbers: AWS's payload
  (``streams.adapters.sms_inbound.payload``) published to the subscriber, logged to
  ``inbound.jsonl`` beside ``sent.jsonl`` with the subscriber's answer.

Signatures are not checked: this is a loopback test double of the wire protocol, not of IAM.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from stack.ses_server import Faults, confirm, signing_cert
from stack.sns_publisher import CERT_PATH, CONFIRM_PATH, Publisher
from streams.adapters import sms_inbound, sms_text
from streams.runtime import settings
from streams.runtime.region import EPOCH_TAG as EPOCH_CONTEXT  # streams.adapters.sms's too

TARGET_PREFIX = "PinpointSMSVoiceV2."
CONTENT_TYPE = "application/x-amz-json-1.0"
INBOUND_TOPIC_ARN = "arn:aws:sns:us-east-1:000000000000:cronstream-local-sms-inbound"
# the service model's shapes (botocore pinpoint-sms-voice-v2 2022-03-31)
PHONE_NUMBER = re.compile(r"\+?[1-9][0-9]{1,18}")  # PhoneNumber, at most 20 characters
ORIGINATION = re.compile(r"[A-Za-z0-9_:/\+-]{1,256}")  # TextMessageOriginationIdentity
CONFIGURATION_SET = re.compile(r"[A-Za-z0-9_:/-]{1,256}")  # ConfigurationSetNameOrArn
CONTEXT_KEY = re.compile(r"\S{1,100}")
MAX_BODY = 1600  # TextMessageBody
MESSAGE_TYPES = ("TRANSACTIONAL", "PROMOTIONAL")


class Refusal(Exception):
    """An error answer: its code (``__type``), HTTP status, message and modeled reason."""

    def __init__(self, code: str, message: str, reason: str | None = None, status: int = 400,
                 fields: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.reason, self.status = code, message, reason, status
        self.fields = fields

    def response(self) -> JSONResponse:
        body: dict[str, Any] = {"__type": self.code, "Message": self.message}
        if self.reason is not None:
            body["Reason"] = self.reason
        if self.fields:
            body["Fields"] = self.fields
        return JSONResponse(body, status_code=self.status, media_type=CONTENT_TYPE,
                            headers={"x-amzn-RequestId": str(uuid.uuid4())})


def _invalid(message: str, field: str, reason: str = "FIELD_VALIDATION_FAILED") -> Refusal:
    """A ValidationException naming the member, as the model's ``Fields`` list does."""
    return Refusal("ValidationException", message, reason,
                   fields=[{"Name": field, "Message": message}])


def check_send(body: dict[str, Any]) -> dict[str, Any]:
    """A SendTextMessage request as the service model checks it; a ``ValidationException``
    (raised as ``Refusal``) naming the member otherwise."""
    to = body.get("DestinationPhoneNumber")
    if not isinstance(to, str) or not to:
        raise _invalid("DestinationPhoneNumber is required", "DestinationPhoneNumber",
                       "MISSING_PARAMETER")
    if len(to) > 20 or not PHONE_NUMBER.fullmatch(to):
        raise _invalid(f"DestinationPhoneNumber {to!r} is not a phone number",
                       "DestinationPhoneNumber")
    text = body.get("MessageBody")
    if not isinstance(text, str) or not text.strip():
        raise _invalid("MessageBody is required and must not be blank", "MessageBody",
                       "MISSING_PARAMETER")
    if len(text) > MAX_BODY:
        raise _invalid(f"MessageBody is {len(text)} characters, at most {MAX_BODY}",
                       "MessageBody", "MAXIMUM_SIZE_EXCEEDED")
    origination = body.get("OriginationIdentity")
    if origination is not None and (not isinstance(origination, str)
                                    or not ORIGINATION.fullmatch(origination)):
        raise _invalid(f"OriginationIdentity {origination!r} is malformed", "OriginationIdentity")
    kind = body.get("MessageType", "TRANSACTIONAL")
    if kind not in MESSAGE_TYPES:
        raise _invalid(f"MessageType must be one of {', '.join(MESSAGE_TYPES)}", "MessageType")
    config_set = body.get("ConfigurationSetName")
    if config_set is not None and (not isinstance(config_set, str)
                                   or not CONFIGURATION_SET.fullmatch(config_set)):
        raise _invalid(f"ConfigurationSetName {config_set!r} is malformed", "ConfigurationSetName")
    context = body.get("Context") or {}
    if not isinstance(context, dict) or len(context) > 5 or not all(
            isinstance(k, str) and CONTEXT_KEY.fullmatch(k) and isinstance(v, str)
            and 0 < len(v) <= 800 and v == v.strip() for k, v in context.items()):
        raise _invalid("Context is at most 5 entries, keys of 1 to 100 non-space characters, "
                       "values of 1 to 800 characters without surrounding spaces", "Context")
    return {"to": to, "body": text, "origination": origination, "message_type": kind,
            "configuration_set": config_set, "context": dict(context),
            "dry_run": body.get("DryRun") is True}


class SmsServer:
    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "a", buffering=1)  # noqa: SIM115 - lives with the server
        self._lock = threading.Lock()
        self.faults = Faults()
        self.stats = {"calls": 0, "sent": 0, "parts": 0, "throttled": 0, "timeouts": 0,
                      "invalid": 0, "opted_out": 0, "stale_epoch": 0, "dry_runs": 0,
                      "inbound": 0}
        self._run = uuid.uuid4().hex[:12]  # ids stay unique across restarts of the server
        self._ids = itertools.count(1)
        self.max_epoch = 0  # the highest region epoch a text carried: an older one is refused
        self.opted_out: set[str] = set()  # the account's opt-out list (AWS's default one)
        self.self_managed_opt_outs = False
        self.inbound_publisher: Publisher | None = None
        self.inbound_log = log_path.with_name("inbound.jsonl")

    # -- the API ---------------------------------------------------------------------------------
    async def api(self, request: Request) -> Response:
        """``POST /``: the operation named by ``X-Amz-Target``."""
        target = request.headers.get("x-amz-target", "")
        operation = target[len(TARGET_PREFIX):] if target.startswith(TARGET_PREFIX) else ""
        try:
            body = json.loads(await request.body() or b"{}")
        except ValueError:
            return Refusal("SerializationException", "the body is not JSON").response()
        if not isinstance(body, dict):
            return Refusal("SerializationException", "the body is not a JSON object").response()
        if operation != "SendTextMessage":
            return Refusal("UnknownOperationException",
                           f"this local server does not implement {target or 'that'}").response()
        try:
            return await self.send_text_message(body)
        except Refusal as refusal:
            return refusal.response()

    async def send_text_message(self, body: dict[str, Any]) -> Response:
        self.stats["calls"] += 1
        await self.faults.delay()
        try:
            text = check_send(body)
        except Refusal:
            self.stats["invalid"] += 1
            raise
        epoch = _epoch(text["context"])
        self._fence(epoch)
        size = sms_text.size(text["body"])
        if self._throttled(size.parts):
            raise Refusal("ThrottlingException", "Rate exceeded")
        if text["to"] in self.opted_out and not self.self_managed_opt_outs:
            self.stats["opted_out"] += 1
            raise Refusal("ConflictException", f"{text['to']} is on the opt-out list",
                          "DESTINATION_PHONE_NUMBER_OPTED_OUT")
        message_id = f"local-sms-{self._run}-{next(self._ids):012d}"
        if text["dry_run"]:
            self.stats["dry_runs"] += 1
            return self._answer({"MessageId": message_id})
        line = {"message_id": message_id, "to": text["to"], "origination": text["origination"],
                "body": text["body"], "message_type": text["message_type"],
                "configuration_set": text["configuration_set"], "context": text["context"],
                "encoding": size.encoding.value, "parts": size.parts,
                "at_ms": time.time_ns() // 1_000_000, "epoch": epoch}
        with self._lock:
            self._log.write(json.dumps(line) + "\n")
            self._log.flush()
        self.stats["sent"] += 1
        self.stats["parts"] += size.parts
        await self.faults.hang(self.stats)
        return self._answer({"MessageId": message_id})

    @staticmethod
    def _answer(body: dict[str, Any]) -> JSONResponse:
        return JSONResponse(body, media_type=CONTENT_TYPE,
                            headers={"x-amzn-RequestId": str(uuid.uuid4())})

    def _fence(self, epoch: int | None) -> None:
        """Refuse a text under an epoch older than one already seen; remember a newer one."""
        if epoch is None:
            return
        if epoch < self.max_epoch:
            self.stats["stale_epoch"] += 1
            raise Refusal("AccessDeniedException", f"region epoch {epoch} is older than "
                          f"{self.max_epoch}: the sender was deposed")
        self.max_epoch = epoch

    def _throttled(self, parts: int) -> bool:
        f = self.faults
        if (f.active() and f.throttle_ratio and random.random() < f.throttle_ratio) or \
                f.over_rate(parts):
            self.stats["throttled"] += 1
            return True
        return False

    # -- the test surface ------------------------------------------------------------------------
    async def set_faults(self, request: Request) -> JSONResponse:
        problem = self.faults.apply(await request.json())
        if problem is not None:
            return JSONResponse({"message": problem}, status_code=400)
        return JSONResponse({"ok": True})

    async def get_stats(self, request: Request) -> JSONResponse:
        return JSONResponse(self.stats)

    async def set_opt_outs(self, request: Request) -> JSONResponse:
        """``{"self_managed": bool, "clear": bool, "add": [numbers]}``: the opt-out list's
        behaviour and contents."""
        body = await request.json()
        if "self_managed" in body:
            self.self_managed_opt_outs = bool(body["self_managed"])
        if body.get("clear"):
            self.opted_out.clear()
        self.opted_out.update(str(n) for n in body.get("add", ()))
        return await self.get_opt_outs(request)

    async def get_opt_outs(self, request: Request) -> JSONResponse:
        return JSONResponse({"self_managed": self.self_managed_opt_outs,
                             "numbers": sorted(self.opted_out)})

    async def subscribe_inbound(self, request: Request) -> JSONResponse:
        """Subscribe an endpoint to the inbound texts (``{"endpoint": null}`` stops): answers
        once it has been sent its SubscriptionConfirmation, saying whether it confirmed."""
        body = await request.json()
        if self.inbound_publisher is not None:
            await self.inbound_publisher.close()
            self.inbound_publisher = None
        if not body.get("endpoint"):
            return JSONResponse({"subscribed": False})
        config = {"topic_arn": INBOUND_TOPIC_ARN, **body}
        self.inbound_publisher = Publisher(own_base_url(request), config,
                                           self.inbound_log)
        answer = await self.inbound_publisher.subscribe()
        return JSONResponse({**answer, **self.inbound_publisher.describe()})

    async def get_inbound(self, request: Request) -> JSONResponse:
        publisher = self.inbound_publisher
        if publisher is None:
            return JSONResponse({"subscribed": False})
        return JSONResponse({**publisher.describe(), **publisher.counts,
                             "pending": publisher.pending()})

    async def inbound(self, request: Request) -> JSONResponse:
        """A text from a phone (``from``) to one of our numbers (``to``): the opt-out list
        changed as AWS changes it, and the message published to the subscriber, if any."""
        body = await request.json()
        try:
            sender = sms_text.normalize_e164(str(body.get("from", "")))
            number = sms_text.normalize_e164(str(body.get("to", "")))
        except ValueError as exc:
            return JSONResponse({"message": f"from and to: {exc}"}, status_code=400)
        text = body.get("body")
        if not isinstance(text, str):
            return JSONResponse({"message": "body (the text) is required"}, status_code=400)
        self.stats["inbound"] += 1
        inbound_id = str(uuid.uuid4())
        intent = sms_inbound.intent(text)
        if not self.self_managed_opt_outs:
            if intent is sms_inbound.Intent.OPT_OUT:
                self.opted_out.add(sender)
            elif intent is sms_inbound.Intent.OPT_IN:
                self.opted_out.discard(sender)
        message = sms_inbound.payload(sender, number, text, inbound_id,
                                      keyword=body.get("keyword"),
                                      previous_published_message_id=body.get("previous_message_id"))
        published = self.inbound_publisher is not None and self.inbound_publisher.publish(
            message, {"inbound_message_id": inbound_id, "from": sender, "to": number,
                      "body": text, "intent": intent.value})
        return JSONResponse({"inbound_message_id": inbound_id, "intent": intent.value,
                             "published": published, "opted_out": sender in self.opted_out})

    async def signing_cert(self, request: Request) -> Response:
        return signing_cert()

    async def confirm(self, request: Request) -> Response:
        return confirm(self.inbound_publisher, request)

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        if self.inbound_publisher is not None:  # its publishing task ends with the server
            await self.inbound_publisher.close()
        self._log.close()


def own_base_url(request: Request) -> str:
    """This app's own address, where its SNS links (the signing certificate, the subscription's
    confirmation) must lead. Mounted under ``/sms`` (``stack/messaging_server.py``), Starlette's
    ``base_url`` is the top app's (``app_root_path``), whose routes of the same paths are the SES
    server's: the mount's own part of ``root_path`` is added back."""
    scope = request.scope
    base = str(request.base_url).rstrip("/")
    if "app_root_path" not in scope:  # base_url is root_path's already
        return base
    return base + str(scope.get("root_path", ""))[len(str(scope["app_root_path"])):]


def _epoch(context: dict[str, str]) -> int | None:
    """The region epoch a text carries (None: a one-region sender, or no number)."""
    raw = context.get(EPOCH_CONTEXT, "")
    return int(raw) if raw.isdigit() else None


def create_app(log_path: Path | None = None) -> Starlette:
    path = log_path or settings.load().sms_log  # CRONSTREAM_SMS_LOG, set by whoever starts it
    server = SmsServer(path)
    app = Starlette(routes=[
        Route("/", server.api, methods=["POST"]),
        Route("/_local/faults", server.set_faults, methods=["POST"]),
        Route("/_local/stats", server.get_stats, methods=["GET"]),
        Route("/_local/opt-outs", server.set_opt_outs, methods=["POST"]),
        Route("/_local/opt-outs", server.get_opt_outs, methods=["GET"]),
        Route("/_local/inbound-subscription", server.subscribe_inbound, methods=["POST"]),
        Route("/_local/inbound-subscription", server.get_inbound, methods=["GET"]),
        Route("/_local/inbound", server.inbound, methods=["POST"]),
        Route(CERT_PATH, server.signing_cert, methods=["GET"]),
        Route(CONFIRM_PATH, server.confirm, methods=["GET"]),
    ], lifespan=server.lifespan)
    app.state.server = server  # the tests read the server's state in process
    return app
