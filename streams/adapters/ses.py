"""Sends email through Amazon SES (v2 API) with boto3, against a configurable endpoint.

``CRONSTREAM_SES_ENDPOINT`` (``Settings.ses_endpoint_url``, handed to ``client`` with the region)
points boto3 at any SES-compatible server (the local stack runs ``stack/ses_server.py``);
credentials come from boto3's usual chain (AWS environment variables, instance role), never
from code or logs. SES has no idempotency token, so this module never retries by itself:
it classifies each answer and the caller decides (throttling is always safe to retry — nothing
was sent; a timeout is *unknown* — the mail may have left — and at-most-once callers must not
resend it).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, ReadTimeoutError

THROTTLING = {"TooManyRequestsException", "ThrottlingException", "Throttling",
              "LimitExceededException"}
PERMANENT = {"MessageRejected", "MailFromDomainNotVerifiedException", "BadRequestException",
             "NotFoundException", "AccountSuspendedException"}
MAX_BULK = 50
# the User-Agent every call sends, fixed once: left to botocore it is rebuilt twice per call,
# character by character (its sanitiser), 0.12 ms of the ~1.4 ms of CPU a 50-entry bulk call takes
# (botocore appends its session's own ``Botocore/<version>``)
USER_AGENT = f"cronstream Boto3/{boto3.__version__}"


class Outcome(Enum):
    SENT = "sent"
    THROTTLED = "throttled"  # not sent; retry after backing off
    TRANSIENT = "transient"  # not sent (the request never landed); retry
    PERMANENT = "permanent"  # not sent; retrying will not help
    UNKNOWN = "unknown"  # may have been sent (timeout after the request went out)


@dataclass(frozen=True)
class SendResult:
    outcome: Outcome
    message_id: str | None = None
    error: str | None = None


def classify(exc: Exception) -> SendResult:
    if isinstance(exc, ReadTimeoutError):
        return SendResult(Outcome.UNKNOWN, error=f"timeout after sending: {exc}")
    if isinstance(exc, ConnectionError):
        return SendResult(Outcome.TRANSIENT, error=f"connection: {exc}")
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "")
        message = exc.response.get("Error", {}).get("Message", "")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        text = f"{code}: {message}"[:500]
        if code in THROTTLING or "Maximum sending rate exceeded" in message:
            return SendResult(Outcome.THROTTLED, error=text)
        if code in PERMANENT or 400 <= status < 500:
            return SendResult(Outcome.PERMANENT, error=text)
        return SendResult(Outcome.TRANSIENT, error=text)
    return SendResult(Outcome.UNKNOWN, error=f"{type(exc).__name__}: {exc}"[:500])


# SESv2 operations whose every input member goes into the JSON body (none in the path, the query
# or a header), so the body is the parameters as JSON: botocore's REST-JSON serialiser writes
# exactly ``json.dumps(params)`` for them, after walking the input shape member by member
BODY_ONLY = ("SendEmail", "SendBulkEmail")


def _take_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> dict[str, Any]:
    """``provide-client-params``: encode the request here, in one ``json.dumps``, and hand the
    serialiser nothing to walk. Its walk over a 50-entry SendBulkEmail (seven nested structures
    per entry) was a quarter of the client's CPU per call, and the call is made 280 times a
    second at the fan-out's target rate."""
    context["cronstream_body"] = json.dumps(params).encode("utf-8")
    return {}


def _put_body(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    """``before-call``: the request dict is not signed or sent yet, so the body set here is
    what botocore signs (SigV4 hashes the payload) and sends."""
    body = context.pop("cronstream_body", None)
    if body is not None:
        params["body"] = body
        params["headers"]["Content-Type"] = "application/json"


MAX_HOLD_S = 60.0  # a built request's longest wait for its go (SigV4 allows 5 minutes' skew)


class Withheld(Exception):
    """A request built and signed ahead was never sent: its caller withheld it (``Departure``)."""


class Departure:
    """A request that is built and signed on its thread ahead of time and leaves only when its
    caller says so. Why: at-most-once needs the chunk's intent durable and the send fence passed
    before the request leaves, and whatever runs between the intent and the request is a window
    in which a crash leaves the chunk ``unknown`` with nothing sent (issue 42, item 3). Built
    after the intent, the request spent 1.7 ms at the median and 62 ms at p99 in botocore (its
    serialising, signing and a loaded box's GIL) inside that window; built before it, it waits
    at ``before-send``, the last event before the connection is written to.

    ``go(intent_at)``: leave (``intent_at``: when the intent was acknowledged, on
    ``time.perf_counter``; ``open_s`` is then how long the intent stood before the request left);
    ``withhold()``: never leave (the call raises ``Withheld``); ``last_check``: run on the
    request's thread right before it leaves, after the go (the region's lease), False withholds.
    A request held longer than ``MAX_HOLD_S`` is withheld too: its SigV4 signature (and a
    temporary credential in it) runs out, and SES's 403 would record the chunk ``failed`` though
    nothing was sent; withheld, the chunk is ``refused`` and built again."""

    def __init__(self, last_check: Callable[[], bool] = lambda: True) -> None:
        self.last_check = last_check
        self._decided = threading.Event()
        self._go = False
        self._intent_at = 0.0
        self.open_s: float | None = None

    def go(self, intent_at: float) -> None:
        self._intent_at, self._go = intent_at, True
        self._decided.set()

    def withhold(self) -> None:
        self._decided.set()

    def leave(self) -> None:
        """On the request's thread, at ``before-send``, the request just signed: wait for the
        decision; raise if it is not to go."""
        signed_at = time.monotonic()
        self._decided.wait()
        if not self._go or not self.last_check():
            raise Withheld("withheld before it left: nothing sent")
        if time.monotonic() - signed_at > MAX_HOLD_S:
            raise Withheld(f"held over {MAX_HOLD_S:.0f} s, its signature too old: nothing sent")
        self.open_s = time.perf_counter() - self._intent_at


_DEPARTING = threading.local()  # the Departure of the call this thread is making, if any


def _depart(**_: Any) -> None:
    """``before-send``: the request is signed and about to be written; a call made under a
    ``Departure`` waits here for its go."""
    departure: Departure | None = getattr(_DEPARTING, "departure", None)
    if departure is not None:
        departure.leave()


def client(endpoint_url: str | None, region: str, timeout_s: float = 10.0) -> Any:
    """A client that never retries on its own: botocore's ``max_attempts`` counts *retries*, so
    only ``total_max_attempts: 1`` stops it from re-sending a request that timed out. The
    body-only sends are encoded by ``_take_params`` (the same bytes botocore would write; a unit
    test compares them), through boto3's documented event hooks: signing, HTTP, the answer's
    parsing and the error classes stay botocore's. ``endpoint_url`` and ``region`` are the
    caller's settings (``Settings.ses_endpoint_url``, None for AWS SES, and ``aws_region``);
    the credentials are boto3's chain."""
    made = boto3.client(
        "sesv2",
        endpoint_url=endpoint_url,
        region_name=region,
        # parameter validation costs ~5 ms per 50-recipient bulk call; our requests are built here
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}, read_timeout=timeout_s,
                      connect_timeout=5, max_pool_connections=64, parameter_validation=False,
                      user_agent=USER_AGENT),
    )
    for operation in BODY_ONLY:
        made.meta.events.register(f"provide-client-params.sesv2.{operation}", _take_params)
        made.meta.events.register(f"before-call.sesv2.{operation}", _put_body)
        made.meta.events.register(f"before-send.sesv2.{operation}", _depart)
    return made


def _headers(headers: dict[str, str]) -> list[dict[str, str]]:
    return [{"Name": k, "Value": v} for k, v in headers.items()]


# the tags every cronstream send carries, read back from its events (streams.campaigns.ses_events)
TENANT_TAG = "cronstream-tenant"
CAMPAIGN_TAG = "cronstream-campaign"
CHUNK_TAG = "cronstream-chunk"
FIRE_TAG = "cronstream-fire"
TAG_TEXT = re.compile(r"[^A-Za-z0-9_-]")  # what SES refuses in a message tag's name or value


def tag_value(text: str) -> str:
    """``text`` as an SES message tag value ([A-Za-z0-9_-]{1,256}): any other character becomes
    ``_``. Why tags: SES copies them into every event about the mail (``mail.tags``), which is
    how feedback finds the tenant, campaign, chunk or fire a bounce is about."""
    return TAG_TEXT.sub("_", text)[:256] or "_"


def _tags(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Name": k, "Value": tag_value(v)} for k, v in tags.items()]


def send_one(ses: Any, *, sender: str, to: str, subject: str, text: str | None,
             html: str | None, headers: dict[str, str], configuration_set: str | None,
             tags: dict[str, str] | None = None) -> SendResult:
    body: dict[str, Any] = {}
    if text is not None:
        body["Text"] = {"Data": text, "Charset": "UTF-8"}
    if html is not None:
        body["Html"] = {"Data": html, "Charset": "UTF-8"}
    request: dict[str, Any] = {
        "FromEmailAddress": sender, "Destination": {"ToAddresses": [to]},
        "Content": {"Simple": {"Subject": {"Data": subject, "Charset": "UTF-8"}, "Body": body,
                               "Headers": _headers(headers)}},
    }
    if configuration_set:
        request["ConfigurationSetName"] = configuration_set
    if tags:
        request["EmailTags"] = _tags(tags)
    try:
        return SendResult(Outcome.SENT, message_id=ses.send_email(**request)["MessageId"])
    except (ClientError, BotoCoreError) as exc:
        return classify(exc)


@dataclass(frozen=True)
class BulkEntry:
    email: str
    headers: dict[str, str]
    template_data: str  # JSON of the recipient's variables, for {{name}} placeholders


def send_bulk(ses: Any, *, sender: str, subject: str, text: str | None, html: str | None,
              entries: list[BulkEntry], configuration_set: str | None,
              common_headers: dict[str, str] | None = None, tags: dict[str, str] | None = None,
              departure: Departure | None = None) -> tuple[SendResult, list[SendResult]]:
    """One SendBulkEmail call (<= 50 entries). Returns the call's outcome and, when it was
    accepted, one result per entry (an entry can be rejected while others leave).
    ``common_headers`` go once into the template; SES adds them to every entry's email (an
    entry's header of the same name wins); ``tags`` go once too (``DefaultEmailTags``).
    ``departure``: the request is built and signed now and leaves on its go (``Withheld`` if
    it is withheld)."""
    content: dict[str, Any] = {"Subject": subject}
    if text is not None:
        content["Text"] = text
    if html is not None:
        content["Html"] = html
    template: dict[str, Any] = {"TemplateContent": content, "TemplateData": "{}"}
    if common_headers:
        template["Headers"] = _headers(common_headers)
    request: dict[str, Any] = {
        "FromEmailAddress": sender,
        "DefaultContent": {"Template": template},
        "BulkEmailEntries": [{
            "Destination": {"ToAddresses": [e.email]},
            "ReplacementHeaders": _headers(e.headers),
            "ReplacementEmailContent": {"ReplacementTemplate": {
                "ReplacementTemplateData": e.template_data}},
        } for e in entries],
    }
    if configuration_set:
        request["ConfigurationSetName"] = configuration_set
    if tags:
        request["DefaultEmailTags"] = _tags(tags)
    _DEPARTING.departure = departure
    try:
        answer = ses.send_bulk_email(**request)
    except (ClientError, BotoCoreError) as exc:
        return classify(exc), []
    finally:
        _DEPARTING.departure = None
    results = []
    for item in answer.get("BulkEmailEntryResults", []):
        if item.get("Status") == "SUCCESS":
            results.append(SendResult(Outcome.SENT, message_id=item.get("MessageId")))
        else:
            results.append(SendResult(Outcome.PERMANENT,
                                      error=f"{item.get('Status')}: {item.get('Error', '')}"))
    while len(results) < len(entries):  # an answer that leaves entries out: they may have left
        results.append(SendResult(Outcome.UNKNOWN, error="no result for this entry"))
    return SendResult(Outcome.SENT), results


# what cronstream's feedback uses (streams.campaigns.ses_events): outcomes, suppressions, the guard
EVENT_TYPES = ("SEND", "DELIVERY", "BOUNCE", "COMPLAINT", "REJECT", "DELIVERY_DELAY")


CONFIGURATION_SET_PREFIX = "cronstream-"
POOL_SEPARATOR = "_"  # never in a tenant's name ([a-z0-9-]), so the name reads one way only


def configuration_set(tenant: str, pool: str | None = None) -> str:
    """The configuration set a tenant's campaigns send through in an IP pool
    (``cronstream-<tenant>_<pool>``), or (no pool) its reminder emails (``cronstream-<tenant>``):
    per tenant, so SES's events, sending statistics and dedicated IPs are per tenant.

    Why ``_``: with ``-`` (as before), tenant ``acme``'s pool ``corp-x`` and tenant
    ``acme-corp``'s pool ``x`` were the same configuration set, so one tenant sent through the
    other's IPs and counted in its reputation and bounces (issue 40). A tenant's name has no
    ``_``, so the first one ends it."""
    return (f"{CONFIGURATION_SET_PREFIX}{tenant}" if pool is None
            else f"{CONFIGURATION_SET_PREFIX}{tenant}{POOL_SEPARATOR}{pool}")


def configuration_set_owner(name: str) -> tuple[str, str | None] | None:
    """(tenant, pool) of a configuration set ``configuration_set`` names (pool None: the
    tenant's reminders); None for a name it does not make. A name of the old form
    (``cronstream-<tenant>-<pool>``, no ``_``) reads as a tenant's reminders' set here: callers
    that must read those too resolve them against the tenants they know."""
    if not name.startswith(CONFIGURATION_SET_PREFIX):
        return None
    rest = name[len(CONFIGURATION_SET_PREFIX):]
    tenant, sep, pool = rest.partition(POOL_SEPARATOR)
    if not tenant or (sep and not pool):
        return None
    return tenant, pool if sep else None


def ensure_event_destination(ses: Any, configuration_set_name: str, topic_arn: str,
                             name: str = "cronstream") -> str:
    """Make ``configuration_set_name`` publish the events cronstream reads to the SNS topic
    ``topic_arn``: the configuration set is created if missing, the event destination ``name``
    created or else updated, so running it again is harmless. Returns what it did."""
    destination = {"Enabled": True, "MatchingEventTypes": list(EVENT_TYPES),
                   "SnsDestination": {"TopicArn": topic_arn}}
    created_set = True
    try:
        ses.create_configuration_set(ConfigurationSetName=configuration_set_name)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "AlreadyExistsException":
            raise
        created_set = False
    try:
        ses.create_configuration_set_event_destination(
            ConfigurationSetName=configuration_set_name, EventDestinationName=name,
            EventDestination=destination)
        action = "created"
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "AlreadyExistsException":
            raise
        ses.update_configuration_set_event_destination(
            ConfigurationSetName=configuration_set_name, EventDestinationName=name,
            EventDestination=destination)
        action = "updated"
    return f"{action} event destination {name}" + (
        f" (and the configuration set {configuration_set_name})" if created_set else "")
