"""Sends text messages through AWS End User Messaging SMS (``pinpoint-sms-voice-v2``,
``SendTextMessage``) with boto3, against a configurable endpoint (issue 45).

``CRONSTREAM_SMS_ENDPOINT`` (``Settings.sms_endpoint_url``, handed to ``client`` with the
region) points boto3 at any compatible server (``stack/sms_server.py`` locally); credentials
come from boto3's chain, never from code or logs. As with SES (``streams.adapters.ses``),
SendTextMessage has no idempotency token, so this module never retries by itself: it
classifies each answer and the caller decides. Throttling is always safe to retry (nothing was
sent); a timeout or a dropped connection after the request went out is *unknown* (the text may
have left) and an at-most-once caller records it so and never sends again; a connection that
was never made is *transient* (nothing left); a refusal is *permanent*, and the one refusal
the caller acts on apart from that, a destination on AWS's opt-out list, is ``OPTED_OUT``.

The error codes and reasons are the service model's (botocore's
``pinpoint-sms-voice-v2/2022-03-31/service-2.json``): SendTextMessage raises
ServiceQuotaExceededException, ThrottlingException, AccessDeniedException,
ResourceNotFoundException, ValidationException, ConflictException (reason
``DESTINATION_PHONE_NUMBER_OPTED_OUT`` among others) and InternalServerException.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
    ReadTimeoutError,
)

from streams.runtime.region import EPOCH_TAG

SERVICE = "pinpoint-sms-voice-v2"
THROTTLING = {"ThrottlingException", "TooManyRequestsException", "Throttling"}
OPTED_OUT_REASON = "DESTINATION_PHONE_NUMBER_OPTED_OUT"
MESSAGE_TYPES = ("TRANSACTIONAL", "PROMOTIONAL")
# the Context entries every cronstream text carries (the same names as the SES tags, so a log
# line or an event reads alike): SendTextMessage's Context is copied into the text's events
TENANT_CONTEXT = "cronstream-tenant"
FIRE_CONTEXT = "cronstream-fire"
EPOCH_CONTEXT = EPOCH_TAG  # the region's epoch (docs/regions.md): the fence's token
MAX_CONTEXT = 5  # ContextMap: at most 5 entries, keys 1-100 characters, values 1-800
MAX_CONTEXT_VALUE = 800
USER_AGENT = f"cronstream Boto3/{boto3.__version__}"


class Outcome(Enum):
    SENT = "sent"
    THROTTLED = "throttled"  # not sent; retry after backing off, never drop
    TRANSIENT = "transient"  # not sent (the request never landed, or the service failed); retry
    PERMANENT = "permanent"  # not sent; retrying will not help
    OPTED_OUT = "opted_out"  # not sent: the destination is on AWS's opt-out list
    UNKNOWN = "unknown"  # may have been sent (no answer after the request went out)


@dataclass(frozen=True)
class SendResult:
    outcome: Outcome
    message_id: str | None = None
    error: str | None = None


def classify(exc: Exception) -> SendResult:
    """One failed call's outcome. Why the order: botocore's ``ReadTimeoutError`` and
    ``ConnectionClosedError`` are HTTP client errors raised after the request was written (the
    text may have left), while its ``ConnectionError`` family (endpoint unreachable, connect
    timeout, TLS, proxy) fails before a byte of the request is sent, and so do botocore's own
    checks: a parameter the model refuses (permanent) and missing credentials (transient: an
    instance role's come back)."""
    if isinstance(exc, ParamValidationError):
        return SendResult(Outcome.PERMANENT, error=f"refused before sending: {exc}"[:500])
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return SendResult(Outcome.TRANSIENT, error=f"not sent: {exc}"[:500])
    if isinstance(exc, ReadTimeoutError):
        return SendResult(Outcome.UNKNOWN, error=f"timeout after sending: {exc}"[:500])
    if isinstance(exc, ConnectionError):
        return SendResult(Outcome.TRANSIENT, error=f"connection: {exc}"[:500])
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code, message = error.get("Code", ""), error.get("Message", "")
        reason = str(exc.response.get("Reason") or "")  # the modeled member, when the shape has it
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        text = (f"{code}" + (f" ({reason})" if reason else "") + f": {message}")[:500]
        if code in THROTTLING:
            return SendResult(Outcome.THROTTLED, error=text)
        if code == "ConflictException" and reason == OPTED_OUT_REASON:
            return SendResult(Outcome.OPTED_OUT, error=text)
        if 400 <= status < 500:
            return SendResult(Outcome.PERMANENT, error=text)
        return SendResult(Outcome.TRANSIENT, error=text)
    return SendResult(Outcome.UNKNOWN, error=f"{type(exc).__name__}: {exc}"[:500])


def client(endpoint_url: str | None, region: str, timeout_s: float = 10.0) -> Any:
    """A ``pinpoint-sms-voice-v2`` client that never retries on its own (``total_max_attempts``
    1: botocore's ``max_attempts`` counts retries, and its standard mode retries throttling and
    500s, which would send a text twice behind the caller's back). ``endpoint_url`` and
    ``region`` are the caller's settings (``Settings.sms_endpoint_url``, None for AWS, and
    ``aws_region``); the credentials are boto3's chain."""
    return boto3.client(
        SERVICE,
        endpoint_url=endpoint_url,
        region_name=region,
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}, read_timeout=timeout_s,
                      connect_timeout=5, max_pool_connections=16, user_agent=USER_AGENT),
    )


def context(tenant: str, fire_id: str, epoch: int | None = None) -> dict[str, str]:
    """The Context of a reminder's text: its tenant, its fire id and (two regions) the epoch it
    was sent under, the local server's fence. Values are cut to the 800 characters AWS allows."""
    entries = {TENANT_CONTEXT: tenant, FIRE_CONTEXT: fire_id}
    if epoch:
        entries[EPOCH_CONTEXT] = str(epoch)
    return {k: v[:MAX_CONTEXT_VALUE] for k, v in entries.items()}


def send_text(sms: Any, *, to: str, body: str, origination: str | None,
              message_type: str = "TRANSACTIONAL", configuration_set: str | None = None,
              context: Mapping[str, str] | None = None) -> SendResult:
    """One SendTextMessage call, classified (never retried here). ``to`` is E.164
    (``streams.adapters.sms_text``); ``origination`` a phone number, sender id, pool id or ARN
    (None: AWS picks from the account's identities); ``message_type`` TRANSACTIONAL for
    reminders (time-sensitive, routed as such by carriers)."""
    if message_type not in MESSAGE_TYPES:
        return SendResult(Outcome.PERMANENT, error=f"message type {message_type!r} is not one of "
                          f"{', '.join(MESSAGE_TYPES)}")
    request: dict[str, Any] = {"DestinationPhoneNumber": to, "MessageBody": body,
                               "MessageType": message_type}
    if origination:
        request["OriginationIdentity"] = origination
    if configuration_set:
        request["ConfigurationSetName"] = configuration_set
    if context:
        if len(context) > MAX_CONTEXT:
            return SendResult(Outcome.PERMANENT, error=f"at most {MAX_CONTEXT} context entries")
        request["Context"] = dict(context)
    try:
        answer = sms.send_text_message(**request)
    except (ClientError, BotoCoreError) as exc:
        return classify(exc)
    message_id = answer.get("MessageId")
    if not message_id:  # accepted without an id: it may have left, and nothing names it
        return SendResult(Outcome.UNKNOWN, error="SendTextMessage answered without a MessageId")
    return SendResult(Outcome.SENT, message_id=message_id)
