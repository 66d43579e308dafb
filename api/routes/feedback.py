"""``POST /v1/feedback/sns``: SES events arriving through an SNS topic's HTTP(S) subscription.

No API key: SNS cannot send one. The credential is the message's signature, checked as AWS
documents it (``streams.adapters.sns``) against a certificate fetched only from an allowed SNS
host; the topic must be one the operator configured (``CRONSTREAM_SNS_TOPICS``). Every refusal
is a 4xx naming the problem and writes nothing: unsigned, a bad signature, a certificate or
subscribe URL off the allowed hosts, older than the window (a replay: SNS never retries past an
hour), an unexpected topic.

A second delivery of a MessageId already written (SNS delivers at least once, and retries a
delivery whose answer it did not see) is answered 200 and writes nothing again; a delivery
while the first is still being written waits for it. This memory is a SQLite file of the
stack's home (``streams.adapters.sns.SharedSeen``), shared by the API processes of that home
and kept across restarts (it was per process: issue 40); the topic's consumer stays idempotent
on the SES event's message id, type and recipient for processes elsewhere. SignatureVersion 1
(SHA1) is refused unless ``CRONSTREAM_SNS_ALLOW_SIGNATURE_V1`` is set.

An accepted Notification becomes one ``SesFeedback`` record per affected recipient
(``streams.campaigns.ses_events``), on that recipient's partition, acknowledged by the broker
before the 200: a 5xx (the broker down) makes SNS retry.

The same endpoint takes the two-way messages of the tenants' numbers (AWS End User Messaging
SMS publishes inbound texts to an SNS topic; ``streams.adapters.sms_inbound``): a STOP (or any
opt-out keyword) suppresses the phone for each tenant it applies to through the one suppression
path, acknowledged before the 200 as the API's own ``POST /v1/suppressions`` is, so no text
starts after it; START lifts it. An authentic but malformed one is answered and ignored, naming
what is wrong, as an unreadable SES event is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import APIRouter, HTTPException, Request

from api.errors import problem
from api.routes.suppressions import suppress
from api.state import ApiState
from streams.adapters import sms_inbound, sns
from streams.campaigns import ses_events, suppressions
from streams.runtime import clock
from streams.runtime.codec import codec
from streams.runtime.settings import Settings
from streams.topology import SES_FEEDBACK, partition_for

log = logging.getLogger(__name__)
router = APIRouter(tags=["feedback"])
MAX_FETCH_BYTES = 64 * 1024  # a PEM certificate, or SNS's ConfirmSubscription answer
CERTS_KEPT = 16  # SNS rotates its signing certificate rarely; one per region in use
CERT_TTL_S = 86400.0  # fetched (and its validity checked) again after a day

Fetch = Callable[[str], Awaitable[bytes]]


async def http_get(url: str) -> bytes:
    """GET a certificate or a SubscribeURL: no redirects (the host was checked, not where it
    might send us), a size limit, a short timeout."""
    async with httpx.AsyncClient(timeout=10.0, follow_redirects=False) as client:
        response = await client.get(url)
        response.raise_for_status()
        if len(response.content) > MAX_FETCH_BYTES:
            raise httpx.HTTPError(f"answer larger than {MAX_FETCH_BYTES} bytes")
        return response.content


def policy_of(conf: Settings) -> sns.Policy:
    return sns.Policy(topics=conf.sns_topics, cert_hosts=conf.sns_cert_hosts or sns.DEFAULT_CERT_HOSTS,
                      allow_http=conf.sns_allow_http, max_age_s=conf.sns_max_age_s,
                      allow_signature_v1=conf.sns_allow_signature_v1)


class Intake:
    """The endpoint's state in the API process: the policy, the certificates fetched so far, the
    MessageIds accepted, the deliveries being written."""

    def __init__(self, policy: sns.Policy, fetch: Fetch = http_get,
                 now_s: Callable[[], float] = time.time,
                 seen: sns.SeenMessages | sns.SharedSeen | None = None) -> None:
        self.policy, self.fetch, self.now_s = policy, fetch, now_s
        self.seen = seen if seen is not None else sns.SeenMessages(policy.max_age_s)
        self._writing: dict[str, asyncio.Future[None]] = {}
        self._keys: OrderedDict[str, tuple[rsa.RSAPublicKey, float]] = OrderedDict()

    async def key(self, url: str, now_s: float) -> rsa.RSAPublicKey:
        cached = self._keys.get(url)
        if cached is not None and now_s - cached[1] < CERT_TTL_S:
            self._keys.move_to_end(url)
            return cached[0]
        try:
            pem = await self.fetch(url)
        except (httpx.HTTPError, OSError) as exc:  # SNS retries a 5xx
            raise HTTPException(502, detail=f"could not fetch the signing certificate: "
                                            f"{type(exc).__name__}") from exc
        key = sns.public_key(pem, now_s)
        self._keys[url] = (key, now_s)
        self._keys.move_to_end(url)
        while len(self._keys) > CERTS_KEPT:
            self._keys.popitem(last=False)
        return key


def intake_of(request: Request) -> Intake:
    state = request.app.state
    if getattr(state, "sns_intake", None) is None:
        conf = state.api.conf
        policy = policy_of(conf)
        state.sns_intake = Intake(policy, seen=sns.SharedSeen(
            conf.home / "api" / "sns-seen.sqlite3", policy.max_age_s))
    intake: Intake = state.sns_intake
    return intake


BODY_SCHEMA = {  # what SNS posts (as text/plain unless the subscription's policy says otherwise)
    "type": "object",
    "required": ["Type", "MessageId", "TopicArn", "Message", "Timestamp", "SignatureVersion",
                 "Signature", "SigningCertURL"],
    "properties": {name: {"type": "string"} for name in (
        "Type", "MessageId", "Token", "TopicArn", "Subject", "Message", "Timestamp",
        "SignatureVersion", "Signature", "SigningCertURL", "SubscribeURL", "UnsubscribeURL")},
}


@router.post(
    "/v1/feedback/sns",
    summary="SES events through an SNS HTTP(S) subscription (no API key: the message's "
            "signature is the credential)",
    # documented as JSON (SNS sends it as text/plain by default; the body is read either way)
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/json": {"schema": BODY_SCHEMA}}}},
)
async def sns_message(request: Request) -> dict[str, Any]:
    intake = intake_of(request)
    policy = intake.policy
    try:
        message = sns.parse(await request.body())
        said = request.headers.get("x-amz-sns-message-type")
        if said is not None and said != message["Type"]:
            raise sns.Rejected(400, f"x-amz-sns-message-type {said[:50]!r} is not the body's "
                                    f"Type {message['Type']!r}")
        sns.check_version(message, policy)
        pinned = sns.check_topic(message, policy)
        now = intake.now_s()
        at = sns.check_age(message, now, policy)
        cert_url = sns.check_url(message["SigningCertURL"], policy, "SigningCertURL")
        if message["Type"] == sns.SUBSCRIBE:
            sns.check_url(message["SubscribeURL"], policy, "SubscribeURL")
        sns.verify(message, await intake.key(cert_url, now))
    except sns.Rejected as exc:
        log.warning("SNS message refused (%d): %s", exc.status, exc.problem)
        raise problem(exc.status, "", exc.problem) from exc
    topic = message["TopicArn"]
    if message["Type"] == sns.SUBSCRIBE:
        try:
            await intake.fetch(message["SubscribeURL"])
        except (httpx.HTTPError, OSError) as exc:
            raise HTTPException(502, detail=f"could not confirm the subscription: "
                                            f"{type(exc).__name__}") from exc
        log.info("confirmed the SNS subscription to %s", topic)
        return {"confirmed": topic}
    if message["Type"] == sns.UNSUBSCRIBE:
        log.warning("SNS says the subscription to %s was removed (not re-subscribed)", topic)
        return {"unsubscribed": topic}
    return await _notification(request.app.state.api, intake, message, pinned, at, now)


async def _notification(api: ApiState, intake: Intake, message: dict[str, str],
                        pinned: str | None, at: float, now: float) -> dict[str, Any]:
    message_id = message["MessageId"]
    if message_id in intake.seen:
        return {"written": 0, "duplicate": True}
    first = intake._writing.get(message_id)
    if first is not None:
        try:
            await asyncio.shield(first)
        except Exception as exc:
            raise HTTPException(503, detail="the first delivery of this message failed; "
                                            "retry") from exc
        return {"written": 0, "duplicate": True}
    writing: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    intake._writing[message_id] = writing
    try:
        answer = await _write(api, message, pinned)
    except Exception as exc:
        writing.set_exception(exc)
        writing.exception()  # retrieved: a failure no duplicate waited for is not "never retrieved"
        log.error("SNS message %s not written: %s", message_id, exc)
        raise HTTPException(503, detail="could not write the events; retry") from exc
    except BaseException:  # cancelled: a duplicate waiting on it is told to retry
        writing.set_exception(RuntimeError("cancelled"))
        writing.exception()
        raise
    else:
        intake.seen.add(message_id, at, now)
        writing.set_result(None)
        return answer
    finally:
        del intake._writing[message_id]


async def _write(api: ApiState, message: dict[str, str], pinned: str | None) -> dict[str, Any]:
    raw = message["Message"]
    if sms_inbound.is_inbound_text(raw):
        return await _inbound_text(api, message, pinned)
    try:
        event = ses_events.parse_event(raw)
        tenant = ses_events.tenant_of(event, pinned, lambda name: api.tenants.get(name) is not None)
        if tenant is None:
            raise ses_events.BadEvent("no tenant: the topic is not pinned to one and the event's "
                                    "configuration set names no single known tenant")
        records = ses_events.records(event, raw, tenant=tenant, sns_message_id=message["MessageId"],
                                   topic_arn=message["TopicArn"], received_ms=clock.now_ms())
    except ses_events.BadEvent as exc:
        # authentic, but nothing cronstream can attribute or read: answered 200, or SNS would
        # retry for an hour what will never be readable
        log.warning("SNS message %s on %s ignored: %s", message["MessageId"], message["TopicArn"], exc)
        return {"written": 0, "ignored": str(exc)}
    encode = codec().encode
    await asyncio.gather(*(
        api.emitter.send(SES_FEEDBACK, ses_events.key(r), encode("SesFeedback", r),
                         partition_for(r["email"], api.conf.partitions)) for r in records))
    return {"written": len(records), "event_type": ses_events.event_type(event)}


async def _inbound_text(api: ApiState, message: dict[str, str], pinned: str | None
                        ) -> dict[str, Any]:
    """An inbound text: an opt-out suppresses the sender's number for each tenant it applies
    to (``sms_inbound.tenants_of``), an opt-in lifts it, anything else is answered and kept
    nowhere (HELP and the like are AWS's to answer)."""
    try:
        text = sms_inbound.parse(message["Message"])
    except ValueError as exc:
        # authentic but unreadable: answered 200 as an unreadable SES event is, or SNS would
        # retry for an hour what will never be readable
        log.warning("SNS message %s on %s ignored: %s", message["MessageId"], message["TopicArn"],
                    exc)
        return {"written": 0, "ignored": str(exc)}
    wants = sms_inbound.intent(text.body)
    tenants = sms_inbound.tenants_of(text, pinned, api.tenants.values())
    if wants is sms_inbound.Intent.NONE or not tenants:
        why = "no opt-out or opt-in keyword" if tenants else f"no tenant has {text.number}"
        log.info("inbound text %s to %s: nothing to do (%s)", text.inbound_message_id,
                 text.number, why)
        return {"written": 0, "ignored": why}
    for tenant in tenants:
        if wants is sms_inbound.Intent.OPT_OUT:
            await suppress(api, tenant, text.sender, f"replied {text.body.strip()[:40]!r} to "
                           f"{text.number}", "sms_reply")
        else:
            await suppressions.lift(api.emitter, tenant, text.sender, api.conf.partitions)
            api.suppressions.put(suppressions.key(tenant, text.sender), None)
        log.info("tenant %s: %s %s (inbound text %s to %s)", tenant,
                 "suppressed" if wants is sms_inbound.Intent.OPT_OUT else "lifted the suppression of",
                 text.sender, text.inbound_message_id, text.number)
    return {"written": len(tenants), "sms": wants.value, "tenants": tenants}
