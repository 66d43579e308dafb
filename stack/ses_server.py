"""A local SES-compatible server (the SESv2 REST API subset cronstream uses), for tests, the
demo and benchmarks: boto3 reaches it through ``endpoint_url`` exactly as it would reach AWS.

- ``POST /v2/email/outbound-emails`` (SendEmail) and ``/v2/email/outbound-bulk-emails``
  (SendBulkEmail, up to 50 destinations) accept mail and append one JSON line per recipient to
  ``sent.jsonl``: the server's own log, which checkers compare with the ledger.
- ``POST /_local/faults`` injects trouble: ``throttle_ratio`` (that share of calls answers 429
  ``TooManyRequestsException`` "Maximum sending rate exceeded"), ``timeout_after_accept_ratio``
  (the mail is accepted and logged, then the answer is delayed past the client's timeout),
  ``max_rate_per_s`` (recipients per second before throttling), ``latency_ms`` (every call
  answered that much later, as Amazon SES's own 50-100 ms: callers then hold their requests open
  as against the real service), for ``seconds`` (0 = until reset).
- ``GET /_local/stats`` counts calls, recipients and throttles.
- A call tagged ``cronstream-epoch`` (a region's epoch, docs/regions.md) under an epoch older than
  one already seen is refused (``MessageRejected``, counted as ``stale_epoch``): the fencing
  token, checked as a fencing-aware receiver would (Amazon SES does not). Each logged line
  carries the epoch it was sent under.
- The configuration-set calls ``cronstream ses-events`` makes (CreateConfigurationSet, Create-,
  Update- and GetConfigurationSetEventDestinations): kept in memory, so the command is tested
  against the wire protocol. The event publishing below does not depend on them.
- ``GET /_local/calls?campaign=ID`` lists the bulk calls tagged with that campaign: the chunk
  tag, when the request arrived and when it was answered, and whether it was accepted or
  throttled. The fault suite reads it to tell a chunk with a request in flight at a crash from
  one that was waiting out a refusal (issue 30, narrow ``unknown``).
- ``POST /_local/events`` makes it publish SES events of what it accepts to an SNS-style HTTP(S)
  subscriber (``stack.sns_publisher``): signed as SNS signs, with SES's mailbox simulator
  semantics, bounce/complaint rates by address pattern, delays, duplicates and reordering.
  Off until asked: with no subscriber a send does no event work at all.

Signatures are not checked: this is a loopback test double of the wire protocol, not of IAM.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from stack.sns_publisher import CERT_PATH, CONFIRM_PATH, Publisher
from streams.runtime import settings

MAX_BULK = 50
CONFIGURATION_SET_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # as SES allows
MAX_CALLS_KEPT = 1_000_000  # the call log is memory only: the oldest go first
CAMPAIGN_TAG, CHUNK_TAG = "cronstream-campaign", "cronstream-chunk"  # streams.adapters.ses's tags
EPOCH_TAG = "cronstream-epoch"  # streams.runtime.region: the region's epoch a send was made under


class Faults:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.throttle_ratio = 0.0
        self.timeout_after_accept_ratio = 0.0
        self.timeout_s = 30.0
        self.max_rate_per_s = 0.0
        self.latency_ms = 0.0
        self.until = 0.0
        self.window_start = time.monotonic()
        self.window_count = 0

    NAMES = ("throttle_ratio", "timeout_after_accept_ratio", "timeout_s", "max_rate_per_s",
             "latency_ms", "seconds")

    def apply(self, body: dict[str, Any]) -> str | None:
        """Set the faults of a ``POST /_local/faults`` body, or name its problem (nothing
        changes then: a bad request must not leave half of it applied)."""
        for name in self.NAMES:
            value = body.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                      or value < 0):
                return f"{name} must be a number >= 0, got {value!r}"
        self.reset()
        for name in self.NAMES[:-1]:
            if name in body:
                setattr(self, name, float(body[name]))
        if body.get("seconds"):
            self.until = time.monotonic() + float(body["seconds"])
        return None

    def active(self) -> bool:
        return self.until == 0 or time.monotonic() < self.until

    def over_rate(self, recipients: int) -> bool:
        if not self.max_rate_per_s or not self.active():
            return False
        now = time.monotonic()
        if now - self.window_start >= 1.0:
            self.window_start, self.window_count = now, 0
        if self.window_count + recipients > self.max_rate_per_s:
            return True
        self.window_count += recipients
        return False

    async def delay(self) -> None:
        """``latency_ms`` before an answer, while the faults hold."""
        if self.latency_ms and self.active():
            await asyncio.sleep(self.latency_ms / 1000)

    async def hang(self, stats: dict[str, int]) -> None:
        """Once a request is accepted and logged, its answer held past the client's timeout
        (``timeout_after_accept_ratio`` of the calls; counted in ``stats["timeouts"]``)."""
        if self.active() and self.timeout_after_accept_ratio and \
                random.random() < self.timeout_after_accept_ratio:
            stats["timeouts"] += 1
            await asyncio.sleep(self.timeout_s)


class SesServer:
    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "a", buffering=1 << 16)  # noqa: SIM115 - lives with the server
        self._lock = threading.Lock()
        self.faults = Faults()
        self.stats = {"calls": 0, "recipients": 0, "throttled": 0, "timeouts": 0,
                      "stale_epoch": 0}
        self._run = uuid.uuid4().hex[:12]  # ids stay unique across restarts of the server
        self._ids = itertools.count(1)
        # SES events to an SNS subscriber (POST /_local/events); None: no event work per send
        self.events: Publisher | None = None
        self.events_log = log_path.with_name("events.jsonl")
        # configuration set → event destination name → destination (ConfigurationSet calls)
        self.configuration_sets: dict[str, dict[str, dict[str, Any]]] = {}
        # (campaign tag, chunk tag, arrived ms, answered ms, outcome, epoch) of every tagged
        # bulk call
        self.calls: deque[tuple[str, str, int, int, str, int | None]] = deque(
            maxlen=MAX_CALLS_KEPT)
        # the highest region epoch a call carried: a lower one is a deposed region's, refused
        # (the fencing token, docs/regions.md; Amazon SES itself does not check)
        self.max_epoch = 0

    def _called(self, tags: dict[str, str], arrived_ms: int, outcome: str) -> None:
        if CAMPAIGN_TAG in tags:
            self.calls.append((tags[CAMPAIGN_TAG], tags.get(CHUNK_TAG, ""), arrived_ms,
                               time.time_ns() // 1_000_000, outcome, _epoch(tags)))

    def _stale(self, tags: dict[str, str]) -> JSONResponse | None:
        """The refusal of a call under an epoch older than one already seen, else None (and
        the epoch remembered)."""
        epoch = _epoch(tags)
        if epoch is None:
            return None
        if epoch < self.max_epoch:
            self.stats["stale_epoch"] += 1
            return _error(400, "MessageRejected", f"region epoch {epoch} is older than "
                          f"{self.max_epoch}: the sender was deposed")
        self.max_epoch = epoch
        return None

    def _throttled(self, recipients: int) -> bool:
        f = self.faults
        if (f.active() and f.throttle_ratio and random.random() < f.throttle_ratio) or \
                f.over_rate(recipients):
            self.stats["throttled"] += 1
            return True
        return False

    def _accept(self, lines: list[str], sender: str, recipients: list[tuple[str, dict[str, str]]],
                subject: str, config_set: str | None, epoch: int | None = None) -> list[str]:
        """Log one line per recipient and give each its message id. The call's common fields are
        encoded once and the ids are a per-process prefix and a counter (a uuid4 per recipient
        and a whole ``json.dumps`` per line were a third of this server's CPU: the benchmarks'
        ceiling is this server, on the cores the system under test also uses)."""
        common = json.dumps({"from": sender, "subject": subject, "configuration_set": config_set,
                             "at_ms": time.time_ns() // 1_000_000, "epoch": epoch})[1:]
        ids = []
        dumps = json.dumps
        for to, headers in recipients:
            message_id = f"local-{self._run}-{next(self._ids):012d}"
            lines.append(f'{{"message_id": "{message_id}", "to": {dumps(to)}, '
                         f'"headers": {dumps(headers)}, {common}')
            ids.append(message_id)
        self.stats["recipients"] += len(recipients)
        return ids

    def _write(self, lines: list[str]) -> None:
        """One append per call: the log is read while written, line by line."""
        if lines:
            with self._lock:
                self._log.write("\n".join(lines) + "\n")
                self._log.flush()

    async def send_email(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.stats["calls"] += 1
        await self.faults.delay()
        to = body.get("Destination", {}).get("ToAddresses", [])
        if not to or "FromEmailAddress" not in body:
            return _error(400, "BadRequestException", "Destination.ToAddresses and "
                          "FromEmailAddress are required")
        tags = _tags(body.get("EmailTags"))
        if (stale := self._stale(tags)) is not None:
            return stale
        if self._throttled(len(to)):
            return _error(429, "TooManyRequestsException", "Maximum sending rate exceeded.")
        simple = body.get("Content", {}).get("Simple", {})
        subject = simple.get("Subject", {}).get("Data", "")
        headers = {h["Name"]: h["Value"] for h in simple.get("Headers", [])}
        lines: list[str] = []
        ids = self._accept(lines, body["FromEmailAddress"], [(a, headers) for a in to], subject,
                           body.get("ConfigurationSetName"), _epoch(tags))
        self._write(lines)
        if self.events is not None:
            # one mail with every To address: SES's events of it name them all
            self.events.accepted(ids[-1], body["FromEmailAddress"], list(to),
                                 body.get("ConfigurationSetName"), tags)
        await self.faults.hang(self.stats)
        return JSONResponse({"MessageId": ids[-1]})

    async def send_bulk(self, request: Request) -> JSONResponse:
        arrived_ms = time.time_ns() // 1_000_000
        body = await request.json()
        self.stats["calls"] += 1
        await self.faults.delay()
        entries = body.get("BulkEmailEntries", [])
        if not entries or len(entries) > MAX_BULK:
            return _error(400, "BadRequestException", f"BulkEmailEntries must hold 1 to {MAX_BULK}")
        common_tags = _tags(body.get("DefaultEmailTags"))
        if (stale := self._stale(common_tags)) is not None:
            self._called(common_tags, arrived_ms, "stale_epoch")
            return stale
        if self._throttled(len(entries)):
            self._called(common_tags, arrived_ms, "throttled")
            return _error(429, "TooManyRequestsException", "Maximum sending rate exceeded.")
        template = body.get("DefaultContent", {}).get("Template", {})
        subject = template.get("TemplateContent", {}).get("Subject", "")
        common = {h["Name"]: h["Value"] for h in template.get("Headers", [])}
        accepted: list[tuple[str, dict[str, str]]] = []
        results: list[dict[str, Any]] = []
        for entry in entries:
            to = entry.get("Destination", {}).get("ToAddresses", [])
            if len(to) != 1:
                results.append({"Status": "INVALID_PARAMETER", "Error": "one address per entry"})
                continue
            # SES: an entry's header replaces the template's header of the same name
            headers = dict(common)
            for header in entry.get("ReplacementHeaders", ()):
                headers[header["Name"]] = header["Value"]
            accepted.append((to[0], headers))
            results.append({"Status": "SUCCESS"})
        lines: list[str] = []
        ids = iter(self._accept(lines, body.get("FromEmailAddress", ""), accepted, subject,
                                body.get("ConfigurationSetName"), _epoch(common_tags)))
        for result in results:
            if result["Status"] == "SUCCESS":
                result["MessageId"] = next(ids)
        self._write(lines)
        if self.events is not None:
            sent = [(entry, result) for entry, result in zip(entries, results, strict=True)
                    if result["Status"] == "SUCCESS"]
            for entry, result in sent:
                tags = {**common_tags, **_tags(entry.get("ReplacementTags"))}
                self.events.accepted(result["MessageId"], body.get("FromEmailAddress", ""),
                                     entry["Destination"]["ToAddresses"],
                                     body.get("ConfigurationSetName"), tags)
        await self.faults.hang(self.stats)
        self._called(common_tags, arrived_ms, "accepted")
        return JSONResponse({"BulkEmailEntryResults": results})

    async def set_faults(self, request: Request) -> JSONResponse:
        problem = self.faults.apply(await request.json())
        if problem is not None:
            return _error(400, "BadRequestException", problem)
        return JSONResponse({"ok": True})

    async def get_stats(self, request: Request) -> JSONResponse:
        return JSONResponse(self.stats)

    async def create_configuration_set(self, request: Request) -> JSONResponse:
        name = (await request.json()).get("ConfigurationSetName", "")
        if not CONFIGURATION_SET_NAME.fullmatch(str(name)):
            return _error(400, "BadRequestException", "ConfigurationSetName must be 1 to 64 "
                          "letters, digits, '_' or '-'")
        if name in self.configuration_sets:
            return _error(400, "AlreadyExistsException", f"Configuration set <{name}> already "
                          "exists.")
        self.configuration_sets[name] = {}
        return JSONResponse({})

    async def put_event_destination(self, request: Request) -> JSONResponse:
        """Create (POST, the name in the body) or update (PUT, the name in the path)."""
        name = request.path_params["name"]
        body = await request.json()
        destinations = self.configuration_sets.get(name)
        if destinations is None:
            return _error(404, "NotFoundException", f"Configuration set <{name}> does not exist.")
        creating = request.method == "POST"
        dest = body.get("EventDestinationName") if creating else request.path_params["dest"]
        if not dest or not isinstance(body.get("EventDestination"), dict):
            return _error(400, "BadRequestException", "EventDestinationName and "
                          "EventDestination are required")
        if creating == (dest in destinations):
            return (_error(400, "AlreadyExistsException", f"Event destination <{dest}> already "
                           "exists.") if creating else
                    _error(404, "NotFoundException", f"Event destination <{dest}> does not exist."))
        destinations[dest] = body["EventDestination"]
        return JSONResponse({})

    async def get_event_destinations(self, request: Request) -> JSONResponse:
        name = request.path_params["name"]
        if name not in self.configuration_sets:
            return _error(404, "NotFoundException", f"Configuration set <{name}> does not exist.")
        return JSONResponse({"EventDestinations": [
            {"Name": dest, **value} for dest, value in self.configuration_sets[name].items()]})

    async def get_calls(self, request: Request) -> JSONResponse:
        campaign = request.query_params.get("campaign", "")
        return JSONResponse([{"chunk": chunk, "arrived_ms": arrived, "answered_ms": answered,
                              "outcome": outcome, "epoch": epoch}
                             for tag, chunk, arrived, answered, outcome, epoch in list(self.calls)
                             if tag == campaign])

    async def set_events(self, request: Request) -> JSONResponse:
        """Subscribe an endpoint (``{"endpoint": null}`` stops): answers once the endpoint has
        been sent its SubscriptionConfirmation, saying whether it confirmed."""
        body = await request.json()
        if self.events is not None:
            await self.events.close()
            self.events = None
        if not body.get("endpoint"):
            return JSONResponse({"subscribed": False})
        self.events = Publisher(str(request.base_url).rstrip("/"), body, self.events_log)
        answer = await self.events.subscribe()
        return JSONResponse({**answer, **self.events.describe()})

    async def get_events(self, request: Request) -> JSONResponse:
        if self.events is None:
            return JSONResponse({"subscribed": False})
        return JSONResponse({**self.events.describe(), **self.events.counts,
                             "pending": self.events.pending()})

    async def signing_cert(self, request: Request) -> Response:
        return signing_cert()

    async def confirm(self, request: Request) -> Response:
        return confirm(self.events, request)

    async def sign(self, request: Request) -> JSONResponse:
        """Sign any message with this server's SNS key: the tests make expired, replayed and
        wrong-topic messages that are authentic apart from that (a loopback test double)."""
        body = await request.json()
        return JSONResponse(Publisher.sign(body.get("message", {}), str(body.get("version", "2"))))

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        if self.events is not None:  # its publishing task ends with the server
            await self.events.close()


def signing_cert() -> Response:
    """``CERT_PATH``: the certificate this process signs its SNS messages with."""
    return Response(Publisher.identity()[1], media_type="application/x-pem-file")


def confirm(publisher: Publisher | None, request: Request) -> Response:
    """The SubscribeURL of ``publisher``'s subscription: the subscriber's GET confirms it, as
    SNS's ConfirmSubscription does (the SES events' and the SMS server's inbound texts')."""
    token = request.query_params.get("Token", "")
    if publisher is None or not publisher.confirm(token):
        return Response("<ErrorResponse><Error><Code>InvalidParameter</Code></Error>"
                        "</ErrorResponse>", status_code=400, media_type="text/xml")
    return Response("<ConfirmSubscriptionResponse><ConfirmSubscriptionResult>"
                    f"<SubscriptionArn>{publisher.topic_arn}:local</SubscriptionArn>"
                    "</ConfirmSubscriptionResult></ConfirmSubscriptionResponse>",
                    media_type="text/xml")


def _tags(raw: Any) -> dict[str, str]:
    """SESv2 ``EmailTags`` ([{Name, Value}]) as a dict."""
    if not isinstance(raw, list):
        return {}
    return {t["Name"]: t["Value"] for t in raw if isinstance(t, dict) and "Name" in t and "Value" in t}


def _epoch(tags: dict[str, str]) -> int | None:
    """The region epoch a call carries (None: a one-region sender, or a tag that is no number)."""
    raw = tags.get(EPOCH_TAG, "")
    return int(raw) if raw.isdigit() else None


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"message": message}, status_code=status,
                        headers={"x-amzn-ErrorType": code})


def create_app(log_path: Path | None = None) -> Starlette:
    path = log_path or settings.load().ses_log  # CRONSTREAM_SES_LOG, set by stack up
    server = SesServer(path)
    return Starlette(routes=[
        Route("/v2/email/outbound-emails", server.send_email, methods=["POST"]),
        Route("/v2/email/outbound-bulk-emails", server.send_bulk, methods=["POST"]),
        Route("/v2/email/configuration-sets", server.create_configuration_set, methods=["POST"]),
        Route("/v2/email/configuration-sets/{name}/event-destinations",
              server.put_event_destination, methods=["POST"]),
        Route("/v2/email/configuration-sets/{name}/event-destinations",
              server.get_event_destinations, methods=["GET"]),
        Route("/v2/email/configuration-sets/{name}/event-destinations/{dest}",
              server.put_event_destination, methods=["PUT"]),
        Route("/_local/faults", server.set_faults, methods=["POST"]),
        Route("/_local/stats", server.get_stats, methods=["GET"]),
        Route("/_local/calls", server.get_calls, methods=["GET"]),
        Route("/_local/events", server.set_events, methods=["POST"]),
        Route("/_local/events", server.get_events, methods=["GET"]),
        Route(CERT_PATH, server.signing_cert, methods=["GET"]),
        Route(CONFIRM_PATH, server.confirm, methods=["GET"]),
        Route("/_local/sns/sign", server.sign, methods=["POST"]),
    ], lifespan=server.lifespan)
