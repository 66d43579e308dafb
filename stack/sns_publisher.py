"""The local SES server's event publishing: what SES → SNS → an HTTP(S) subscription does for a
configuration set's event destination, close enough that cronstream's intake
(``POST /v1/feedback/sns``) is tested against the real protocol on the local stack.

- Subscribing sends a signed ``SubscriptionConfirmation`` whose SubscribeURL is this server's
  ``CONFIRM_PATH``; events are published only once the subscriber has fetched it.
- Every message is signed as SNS signs (``streams.adapters.sns.sign``, SignatureVersion 2 by
  default) with a key and self-signed certificate made once per process; the certificate is
  served at ``CERT_PATH`` by this server, so the API fetches it over loopback (the local stack
  allows this host in ``CRONSTREAM_SNS_CERT_HOSTS``).
- Which events a recipient gets follows SES's mailbox simulator: ``success@`` Send + Delivery,
  ``bounce@`` Send + Bounce (Permanent, General), ``complaint@`` Send + Delivery + Complaint,
  ``suppressionlist@`` Send + Bounce (Permanent, Suppressed), ``ooto@`` Send + Delivery (the
  auto-reply is not an event); any other address Send + Delivery, unless a ``rates`` rule for
  its pattern draws a bounce or a complaint, or ``delivery_delay_ratio`` a DeliveryDelay first.
- SNS is at least once and unordered, and so is this on request: ``delay_s`` (each message
  waits a random time up to it, after ``min_delay_s``), ``reorder`` (the wait is drawn per
  message, not per mail, so a mail's events arrive in any order), ``duplicate_ratio`` (that
  share delivered twice, same MessageId and signature). A 5xx or a failed connection is
  retried (3 times, 1/2/4 s), as SNS retries; a 4xx is final, as SNS takes it.
- ``events.jsonl`` beside ``sent.jsonl`` logs each event once, with the answer to its first
  delivery: what the checkers compare the feedback topic with.
- ``Publisher.publish`` sends any other service's notification the same way: the local SMS
  server's inbound texts (``stack.sms_server``, two-way SMS), logged to its ``inbound.jsonl``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import heapq
import itertools
import json
import random
import secrets
import time
import uuid
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from cryptography.hazmat.primitives.asymmetric import rsa

from streams.adapters import sns

LOCAL_TOPIC_ARN = "arn:aws:sns:us-east-1:000000000000:cronstream-local-ses-events"
CERT_PATH = "/_local/sns/SimpleNotificationService-local.pem"
CONFIRM_PATH = "/_local/sns/confirm"
SIMULATOR = "simulator.amazonses.com"
RETRY_DELAYS_S = (1.0, 2.0, 4.0)
CONCURRENCY = 16  # deliveries in flight to the subscriber


def iso(at_s: float) -> str:
    return datetime.fromtimestamp(at_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class Publisher:
    """One subscription of one endpoint, its settings (the body of ``POST /_local/events``) and
    the queue of messages due to it."""

    def __init__(self, base_url: str, config: dict[str, Any], log_path: Path) -> None:
        self.base_url, self.endpoint = base_url, str(config["endpoint"])
        self.topic_arn = str(config.get("topic_arn") or LOCAL_TOPIC_ARN)
        self.version = str(config.get("signature_version", "2"))
        self.delay_s = float(config.get("delay_s", 0.0))
        # every message waits at least this long: SES's own pipeline, or SNS retrying an endpoint
        self.min_delay_s = float(config.get("min_delay_s", 0.0))
        self.reorder = bool(config.get("reorder", False))
        self.duplicate_ratio = float(config.get("duplicate_ratio", 0.0))
        self.delivery_delay_ratio = float(config.get("delivery_delay_ratio", 0.0))
        self.rates = [(str(r["pattern"]).lower(), float(r.get("bounce", 0.0)),
                       float(r.get("complaint", 0.0))) for r in config.get("rates", [])]
        self.types = set(config.get("event_types") or
                         ("Send", "Delivery", "Bounce", "Complaint", "DeliveryDelay"))
        self.random = random.Random(config.get("seed"))
        self.token = secrets.token_hex(32)
        self.confirmed = False
        self.counts = {"events": 0, "deliveries": 0, "accepted": 0, "refused": 0, "failed": 0,
                       "dropped_unconfirmed": 0}
        self._log = open(log_path, "a", buffering=1)  # noqa: SIM115 - lives with the publisher
        self._due: list[tuple[float, int, dict[str, str], bool]] = []  # (due, seq, message, first)
        # the log line of each message not yet delivered once, by its SNS MessageId
        self._records: dict[str, dict[str, Any]] = {}
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._client = httpx.AsyncClient(timeout=30.0)
        self._slots = asyncio.Semaphore(CONCURRENCY)
        self._inflight: set[asyncio.Task[None]] = set()
        self._task = asyncio.get_running_loop().create_task(self._run())

    # -- the signing identity ------------------------------------------------------------------
    @staticmethod
    @cache
    def identity() -> tuple[rsa.RSAPrivateKey, bytes]:
        return sns.new_identity("sns.local.cronstream")

    @classmethod
    def sign(cls, message: dict[str, str], version: str = "2") -> dict[str, str]:
        return sns.sign(message, cls.identity()[0], version)

    def describe(self) -> dict[str, Any]:
        return {"subscribed": True, "endpoint": self.endpoint, "topic_arn": self.topic_arn,
                "confirmed": self.confirmed, "signing_cert_url": self.base_url + CERT_PATH}

    def pending(self) -> int:
        return len(self._due) + len(self._inflight)

    # -- the subscription ----------------------------------------------------------------------
    async def subscribe(self) -> dict[str, Any]:
        message = self._envelope("SubscriptionConfirmation", (
            f"You have chosen to subscribe to the topic {self.topic_arn}. To confirm the "
            f"subscription, visit the SubscribeURL included in this message."))
        message["Token"] = self.token
        message["SubscribeURL"] = (f"{self.base_url}{CONFIRM_PATH}?Action=ConfirmSubscription"
                                   f"&TopicArn={quote(self.topic_arn)}&Token={self.token}")
        status = await self._post(self.sign(message, self.version))
        return {"confirmation_answer": status}

    def confirm(self, token: str) -> bool:
        if secrets.compare_digest(token, self.token):
            self.confirmed = True
        return self.confirmed

    # -- events of accepted mail ---------------------------------------------------------------
    def outcome(self, address: str) -> str:
        """What happens to mail to ``address``: the simulator's answer, else a rate rule's."""
        local, _, domain = address.lower().partition("@")
        if domain == SIMULATOR:
            local = local.split("+", 1)[0]  # the simulator ignores labels (bounce+x@)
            return {"bounce": "bounce", "complaint": "complaint", "suppressionlist": "suppressed",
                    "ooto": "delivery", "success": "delivery"}.get(local, "delivery")
        for pattern, bounce, complaint in self.rates:
            if fnmatch.fnmatchcase(address.lower(), pattern):
                draw = self.random.random()
                if draw < bounce:
                    return "bounce"
                if draw < bounce + complaint:
                    return "complaint"
                break
        return "delivery"

    def accepted(self, message_id: str, sender: str, to: list[str], config_set: str | None,
                 tags: dict[str, str]) -> None:
        """Queue the events of one accepted mail (called only while subscribed)."""
        if not self.confirmed:
            self.counts["dropped_unconfirmed"] += 1
            return
        now = time.time()
        all_tags = {name: [value] for name, value in tags.items()}
        if config_set:
            all_tags["ses:configuration-set"] = [config_set]
        mail = {"timestamp": iso(now), "source": sender, "sendingAccountId": "000000000000",
                "messageId": message_id, "destination": to, "headersTruncated": False,
                "tags": all_tags}
        events: list[dict[str, Any]] = [{"eventType": "Send", "mail": mail, "send": {}}]
        delivered: list[str] = []
        for address in to:
            outcome = self.outcome(address)
            if outcome in ("bounce", "suppressed"):
                events.append({"eventType": "Bounce", "mail": mail, "bounce": {
                    "bounceType": "Permanent",
                    "bounceSubType": "Suppressed" if outcome == "suppressed" else "General",
                    "bouncedRecipients": [{"emailAddress": address, "action": "failed",
                                           "status": "5.1.1",
                                           "diagnosticCode": "smtp; 550 5.1.1 user unknown"}],
                    "timestamp": iso(now), "feedbackId": f"local-fb-{uuid.uuid4().hex}",
                    "reportingMTA": "dsn; local"}})
                continue
            if self.delivery_delay_ratio and self.random.random() < self.delivery_delay_ratio:
                events.append({"eventType": "DeliveryDelay", "mail": mail, "deliveryDelay": {
                    "delayType": "TransientCommunicationFailure", "timestamp": iso(now),
                    "delayedRecipients": [{"emailAddress": address, "status": "4.4.1",
                                           "diagnosticCode": "smtp; 421 4.4.1 try later"}],
                    "expirationTime": iso(now + 86400)}})
            delivered.append(address)
            if outcome == "complaint":
                events.append({"eventType": "Complaint", "mail": mail, "complaint": {
                    "complainedRecipients": [{"emailAddress": address}], "timestamp": iso(now),
                    "feedbackId": f"local-fb-{uuid.uuid4().hex}",
                    "complaintFeedbackType": "abuse"}})
        if delivered:
            at = next((i for i, e in enumerate(events) if e["eventType"] == "Complaint"),
                      len(events))
            events.insert(at, {"eventType": "Delivery", "mail": mail, "delivery": {
                "timestamp": iso(now), "processingTimeMillis": 1, "recipients": delivered,
                "smtpResponse": "250 2.6.0 Message received", "reportingMTA": "local"}})
        mail_wait = self.min_delay_s + self.random.uniform(0, self.delay_s)
        for order, event in enumerate(e for e in events if e["eventType"] in self.types):
            wait = self.min_delay_s + self.random.uniform(0, self.delay_s) if self.reorder \
                else mail_wait
            self._publish(now + wait + order * 1e-3, json.dumps(event), {
                "event_type": event["eventType"], "ses_message_id": event["mail"]["messageId"],
                "recipients": _recipients(event)}, "Amazon SES Email Event Notification")

    def publish(self, text: str, record: dict[str, Any], subject: str | None = None) -> bool:
        """Publish one notification of ``text`` (any service's message: the local SMS server's
        inbound texts) under this subscription's delays and duplicates; ``record`` is its line
        in the log, with its SNS MessageId and the subscriber's answer added. False, and
        nothing sent, while the subscriber has not confirmed (as SNS)."""
        if not self.confirmed:
            self.counts["dropped_unconfirmed"] += 1
            return False
        self._publish(time.time() + self.min_delay_s + self.random.uniform(0, self.delay_s),
                      text, record, subject)
        return True

    def _publish(self, due: float, text: str, record: dict[str, Any], subject: str | None) -> None:
        message = self.sign(self._envelope("Notification", text, subject), self.version)
        self.counts["events"] += 1
        self._records[message["MessageId"]] = {"sns_message_id": message["MessageId"], **record}
        self._queue(due, message, True)
        if self.duplicate_ratio and self.random.random() < self.duplicate_ratio:
            self._queue(due + self.random.uniform(0, max(self.delay_s, 0.05)) + 1e-3, message,
                        False)

    def _envelope(self, kind: str, text: str, subject: str | None = None) -> dict[str, str]:
        message = {"Type": kind, "MessageId": str(uuid.uuid4()), "TopicArn": self.topic_arn,
                   "Message": text, "Timestamp": iso(time.time()),
                   "SigningCertURL": self.base_url + CERT_PATH}
        if subject is not None:
            message["Subject"] = subject
        if kind == "Notification":
            message["UnsubscribeURL"] = f"{self.base_url}/_local/sns/unsubscribe"
        return message

    def _queue(self, due: float, message: dict[str, str], first: bool) -> None:
        heapq.heappush(self._due, (due, next(self._seq), message, first))
        self._wake.set()

    # -- delivery ------------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            if not self._due:
                self._wake.clear()
                await self._wake.wait()
                continue
            wait = self._due[0][0] - time.time()
            if wait > 0:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)
                continue
            _, _, message, first = heapq.heappop(self._due)
            await self._slots.acquire()
            task = asyncio.get_running_loop().create_task(self._deliver(message, first))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

    async def _deliver(self, message: dict[str, str], first: bool) -> None:
        try:
            status = 0
            for delay in (*RETRY_DELAYS_S, None):
                status = await self._post(message)
                if 0 < status < 500 or delay is None:
                    break
                await asyncio.sleep(delay)
            self.counts["deliveries"] += 1
            kind = "accepted" if 200 <= status < 300 else "refused" if 400 <= status < 500 else "failed"
            self.counts[kind] += first
            record = self._records.pop(message["MessageId"], None) if first else None
            if record is not None:
                self._log.write(json.dumps({**record, "answer": status}) + "\n")
        finally:
            self._slots.release()

    async def _post(self, message: dict[str, str]) -> int:
        """The answer's status; 0 if the endpoint could not be reached."""
        try:
            response = await self._client.post(self.endpoint, content=json.dumps(message), headers={
                "content-type": "text/plain; charset=UTF-8",
                "x-amz-sns-message-type": message["Type"],
                "x-amz-sns-message-id": message["MessageId"],
                "x-amz-sns-topic-arn": message["TopicArn"]})
        except httpx.HTTPError:
            return 0
        return response.status_code

    async def close(self) -> None:
        self._task.cancel()
        for task in list(self._inflight):
            task.cancel()
        await asyncio.gather(self._task, *self._inflight, return_exceptions=True)
        await self._client.aclose()
        self._log.close()


def _recipients(event: dict[str, Any]) -> list[str]:
    """Who an event concerns, as the intake reads it (streams.campaigns.ses_events)."""
    kind = event["eventType"]
    if kind == "Bounce":
        return [r["emailAddress"] for r in event["bounce"]["bouncedRecipients"]]
    if kind == "Complaint":
        return [r["emailAddress"] for r in event["complaint"]["complainedRecipients"]]
    if kind == "DeliveryDelay":
        return [r["emailAddress"] for r in event["deliveryDelay"]["delayedRecipients"]]
    if kind == "Delivery":
        return list(event["delivery"]["recipients"])
    return list(event["mail"]["destination"])
