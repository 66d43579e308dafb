"""Runs one attempt of a slot against its target: an HTTP webhook, a Kafka record, an email, a
text message or a campaign's fan-out. ``Targets`` is the one switch over the kinds: a new kind of target is a
function here and a line in ``Targets.attempt`` (and, if a repeat could be seen by a person, a
line in ``AT_MOST_ONCE``), nothing in the executor.

Webhooks carry the fire id (``X-Cronstream-Fire-Id``) so receivers can dedupe our at-least-once
delivery, and in two regions the epoch they were sent under (``X-Cronstream-Region-Epoch``;
emails the tag ``cronstream-epoch``), leaving only while the region's lease holds
(docs/regions.md); redirects are never followed (a redirect could lead past the SSRF guard).
A webhook's host is resolved off the event loop (``streams.adapters.dns``), every address checked
(``streams.execution.ssrf``), and the connection made to one of those addresses with the URL's
own Host header and TLS server name, so no second lookup can send the call elsewhere (DNS
rebinding, issue 40). The client is our own (``webhook_client``): a spike's runs are its cost a
hundred thousand times, and it spent a tenth of aiohttp's CPU a request (docs/performance.md,
"Webhook runs").
Kafka targets may only write topics under the tenant's own prefix (``<tenant>.``), so a job can
never write cronstream's own topics or another tenant's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Protocol
from urllib.parse import urlsplit

from streams.adapters import dns, ses, sms, sms_text, tenants
from streams.execution import reminder_opt_outs, ssrf
from streams.execution.webhook_client import RequestRefused, WebhookClient
from streams.records import Fired, Target, Tenant
from streams.runtime.authority import Lease, LeaseLost, NoRegion
from streams.runtime.emit import Emitter
from streams.runtime.region import EPOCH_HEADER, EPOCH_TAG
from streams.runtime.topic_view import StartedOnce
from streams.topology import TopicSpec

log = logging.getLogger(__name__)

FIRE_ID_HEADER = "X-Cronstream-Fire-Id"
NOMINAL_TIME_HEADER = "X-Cronstream-Nominal-Time"


@dataclass(frozen=True)
class CallResult:
    ok: bool
    status_code: int | None
    error: str | None
    final: bool = False  # True: retrying cannot help (refused target, bad topic)
    unknown: bool = False  # the attempt may have taken effect (email timeout): never repeat it
    message_id: str | None = None
    note: str | None = None  # recorded as the ledger reason (e.g. how a campaign fanned out)
    # the region's lease ended before the request left: nothing was sent, and the attempt does
    # not count (the executor waits for the lease and tries again: docs/regions.md)
    lease_lost: bool = False
    # not sent because the recipient opted out (the tenant's suppressions, or a carrier's or
    # AWS's opt-out list): final, and recorded on the ledger as ``suppressed``, not ``failed``
    # (nothing went wrong, and no dead letter asks anyone to look at it)
    suppressed: bool = False
    # not sent because the service throttled us (nothing left): the executor retries it with
    # backoff until the slot's deadline, without counting it against the job's max_attempts
    # (``streams.execution.retries.throttle_wait_s``): a busy account must never drop a reminder
    throttled: bool = False
    # refused because the number is on AWS's (or a carrier's) opt-out list: ``suppressed``, and
    # written back to the tenant's suppressions (``Targets``), where its lists show it
    opted_out: bool = False


def lease_lost(exc: LeaseLost) -> CallResult:
    return CallResult(False, None, str(exc), lease_lost=True)


def with_epoch(headers: dict[str, str], epoch: int) -> dict[str, str]:
    """The region's epoch on the request (``streams.runtime.region.EPOCH_HEADER``), so a receiver
    that remembers the highest it saw can refuse a deposed region's late call; none in one
    region (epoch 0)."""
    return {**headers, EPOCH_HEADER: str(epoch)} if epoch else headers


def headers_for(fired: Fired) -> dict[str, str]:
    nominal = datetime.fromtimestamp(fired["nominal_ms"] / 1000, tz=UTC).isoformat()
    return {FIRE_ID_HEADER: fired["fire_id"], NOMINAL_TIME_HEADER: nominal}


DEFAULT_TIMEOUT_S = 10.0


def host_of(target: Target) -> str:
    """What a slot's run is limited per (``streams.execution.dispatch``): a webhook's scheme,
    host and port; every other kind of target shares one lane per kind."""
    if target["type"] != "webhook":
        return str(target["type"])
    return _webhook_host(target["url"])


@lru_cache(maxsize=65_536)
def _webhook_host(url: str) -> str:
    """Cached by URL: a spike's slots share a handful of URLs, and parsing each again was a
    fifth of the executor's intake of a fired record."""
    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.hostname}:{parts.port or ''}"
    except ValueError:
        return "webhook:invalid"  # refused by the SSRF check when it runs


async def call_webhook(client: WebhookClient, fired: Fired,
                       allowed: list[str], region: Lease | None = None) -> CallResult:
    """One attempt at a webhook, bounded by its timeout as a whole (resolving, connecting, the
    exchange): 2xx succeeds, anything else fails with the status or what went wrong. With
    ``region``, the request carries its epoch and leaves only while its lease holds."""
    target = fired["target"]
    region = region or NoRegion()
    try:
        epoch = region.check()
    except LeaseLost as exc:
        return lease_lost(exc)
    body = target.get("body")
    timeout_s = target.get("timeout_s") or DEFAULT_TIMEOUT_S
    try:
        async with asyncio.timeout(timeout_s):
            status = await client.request(target.get("method") or "POST", target["url"],
                                          target.get("headers") or {},
                                          body.encode() if body is not None else None, allowed,
                                          with_epoch(headers_for(fired), epoch),
                                          before_send=region.check)
    except LeaseLost as exc:
        return lease_lost(exc)
    except ssrf.TargetRefused as exc:  # transient: the name servers did not answer in time
        return CallResult(False, None, f"target refused: {exc}", final=not exc.transient)
    except RequestRefused as exc:
        return CallResult(False, None, f"request refused: {exc}"[:500], final=True)
    except TimeoutError:
        return CallResult(False, None, f"timed out after {timeout_s} s")
    except OSError as exc:  # refused, reset, closed early, TLS: the next attempt may succeed
        return CallResult(False, None, f"{type(exc).__name__}: {exc}"[:500])
    if 200 <= status < 300:
        return CallResult(True, status, None)
    return CallResult(False, status, f"HTTP {status}")


# cronstream's own topics, Kafka Connect's and Kafka's internal ones: never a tenant's, whatever
# its name (a tenant named ``cronstream``, created before the name was reserved, passed the
# prefix rule for ``cronstream.jobs``: issue 40)
SYSTEM_TOPIC_PREFIXES = ("cronstream.", "cronstream-", "_")


def tenant_topic_allowed(tenant: str, topic: str) -> bool:
    return (topic.startswith(f"{tenant}.") and len(topic) > len(tenant) + 1
            and not topic.startswith(SYSTEM_TOPIC_PREFIXES))


async def produce_record(emitter: Emitter, fired: Fired) -> CallResult:
    target = fired["target"]
    topic = target.get("topic") or ""
    if not tenant_topic_allowed(fired["tenant"], topic):
        return CallResult(False, None, f"topic {topic!r} is outside the tenant prefix "
                          f"{fired['tenant']}.", final=True)
    spec = TopicSpec(name=topic, key="", schema="", compacted=False, doc="tenant topic",
                     partitions=1)
    value = target.get("value")
    try:
        await emitter.send(spec, target.get("key") or fired["job_id"],
                           value.encode() if value is not None else None,
                           headers=headers_for(fired))
    except Exception as exc:  # noqa: BLE001 - broker errors become a retryable failure
        return CallResult(False, None, f"kafka: {exc}"[:500])
    return CallResult(True, None, None)


class SuppressionLookup(Protocol):
    def of(self, tenant: str, to: str) -> dict[str, Any] | None: ...


def suppression_of(suppressions: SuppressionLookup | None, tenant: str, to: str,
                   what: str) -> CallResult | None:
    """A reminder's check of its address (``what``: address or number) against the tenant's
    suppressions, the same for an email and a text: None when it may go; ``suppressed`` (final,
    nothing sent) when it is suppressed; a retryable failure when the view cannot say
    (``reminder_opt_outs.ViewBehind``: nothing sent either)."""
    if suppressions is None:
        return None
    try:
        found = suppressions.of(tenant, to)
    except reminder_opt_outs.ViewBehind as exc:
        return CallResult(False, None, str(exc))
    if found is None:
        return None
    return CallResult(False, None, f"suppressed: {to} is suppressed for the tenant "
                      f"({found['reason']}); not sent", final=True,
                      note=f"not sent: {what} suppressed", suppressed=True)


def send_email(ses_client: Any, fired: Fired, tenant: Tenant | None,
               region: Lease | None = None,
               suppressions: SuppressionLookup | None = None) -> CallResult:
    """One SES attempt for a reminder (blocking: run it in a thread), unless its sender is not
    one the operator granted ``tenant`` (its record as the tenants view has it now: a revoked
    sender stops the next send; ``streams.adapters.tenants.mail_refused``) or its address is
    suppressed for the tenant: the same opt-outs, bounces and complaints as campaigns honour,
    checked after the executor's intent and before SES, so at-most-once is unchanged. Either
    is a final failure naming why (nothing was sent, and retrying cannot help until the grant
    or the suppression changes; a suppressed address is recorded ``suppressed``); a tenant not
    read yet is retried. With ``region``, the lease
    is checked last, in this thread, right before the request, and its epoch tags the mail.
    ``suppressions``: where the address is checked first (``streams.execution.reminder_opt_outs``,
    given by the worker through ``Targets``; a test or benchmark without a broker gives none)."""
    target = fired["target"]
    if tenant is None:
        return CallResult(False, None, f"tenant {fired['tenant']} not in the tenants view yet; "
                          "not sent")
    if (refused := tenants.mail_refused(tenant, target["email_from"] or "")) is not None:
        return CallResult(False, None, f"not sent: {refused[1]}", final=True,
                          note="not sent: sender not granted")
    if (stopped := suppression_of(suppressions, fired["tenant"], target["email_to"],
                                  "address")) is not None:
        return stopped
    try:
        epoch = (region or NoRegion()).check()
    except LeaseLost as exc:
        return lease_lost(exc)
    tags = {ses.TENANT_TAG: fired["tenant"], ses.FIRE_TAG: fired["fire_id"],
            **({EPOCH_TAG: str(epoch)} if epoch else {})}
    result = ses.send_one(ses_client, sender=target["email_from"], to=target["email_to"],
                          subject=target["subject"] or "", text=target["text"],
                          html=target["html"], headers=headers_for(fired),
                          configuration_set=ses.configuration_set(fired["tenant"]), tags=tags)
    if result.outcome is ses.Outcome.SENT:
        return CallResult(True, None, None, message_id=result.message_id)
    return CallResult(False, None, f"{result.outcome.value}: {result.error}",
                      final=result.outcome in (ses.Outcome.PERMANENT, ses.Outcome.UNKNOWN),
                      unknown=result.outcome is ses.Outcome.UNKNOWN)


def send_text(sms_client: Any, fired: Fired, tenant: Tenant | None, region: Lease | None = None,
              suppressions: SuppressionLookup | None = None) -> CallResult:
    """One SendTextMessage attempt for a text reminder (issue 45; blocking: run it in a thread),
    checked as ``send_email`` is, in the same order and for the same reasons: the tenant's
    record (not read yet: retried), its grant of the origination (``tenants.sms_refused``: a
    revoked grant stops the next text; final), the number's suppression for the tenant (the
    suppressions topic is keyed ``tenant:address``, and a number is an address in E.164: a STOP
    the inbound handler recorded stops it; final, recorded ``suppressed``), and last, in this
    thread, the region's lease, whose epoch goes into the text's Context with the tenant and
    fire id. The answer, as ``streams.adapters.sms`` classifies it: SENT is a success with its
    message id; THROTTLED and TRANSIENT sent nothing and are retried (throttling until the
    slot's deadline, ``CallResult.throttled``); OPTED_OUT is AWS's or a carrier's opt-out list,
    recorded ``suppressed`` like the tenant's own; PERMANENT is a final failure; UNKNOWN may
    have been delivered, so it is final and ``unknown``: never sent twice (``AT_MOST_ONCE``)."""
    target = fired["target"]
    to, origination = target["sms_to"] or "", target["sms_origination"]
    ids = f"tenant {fired['tenant']} job {fired['job_id']} fire {fired['fire_id']}"
    if tenant is None:
        return CallResult(False, None, f"tenant {fired['tenant']} not in the tenants view yet; "
                          "not sent")
    if (refused := tenants.sms_refused(tenant, origination)) is not None:
        log.warning("%s: text not sent: %s", ids, refused[1])
        return CallResult(False, None, f"not sent: {refused[1]}", final=True,
                          note="not sent: origination not granted")
    if not sms_text.is_e164(to):  # the API normalises it; a record from elsewhere may not be
        return CallResult(False, None, f"not sent: {to!r} is not an E.164 phone number",
                          final=True, note="not sent: not a phone number")
    if (stopped := suppression_of(suppressions, fired["tenant"], to, "number")) is not None:
        return stopped
    try:
        epoch = (region or NoRegion()).check()
    except LeaseLost as exc:
        return lease_lost(exc)
    result = sms.send_text(sms_client, to=to, body=target["sms_body"] or "",
                           origination=origination,
                           context=sms.context(fired["tenant"], fired["fire_id"], epoch))
    outcome = result.outcome
    if outcome is sms.Outcome.SENT:
        return CallResult(True, None, None, message_id=result.message_id)
    error = f"{outcome.value}: {result.error}"
    if outcome is sms.Outcome.OPTED_OUT:
        return CallResult(False, None, error, final=True, suppressed=True, opted_out=True,
                          note="not sent: number opted out")
    if outcome in (sms.Outcome.THROTTLED, sms.Outcome.TRANSIENT):
        return CallResult(False, None, error, throttled=outcome is sms.Outcome.THROTTLED)
    if outcome is sms.Outcome.UNKNOWN:
        log.warning("%s: text to %s may have been sent (%s); recorded unknown, never sent again",
                    ids, to, result.error)
        return CallResult(False, None, error, final=True, unknown=True)
    log.warning("%s: text to %s refused: %s", ids, to, result.error)
    return CallResult(False, None, error, final=True)


# kinds whose attempt a person could receive twice: the executor writes a durable intent before
# their first attempt, and a slot found with only that intent after a crash is recorded
# ``unknown`` and never attempted again (streams.execution.arrivals); webhooks and Kafka records
# are at-least-once (the fire id travels with them so receivers can dedupe)
AT_MOST_ONCE = frozenset({"email", "sms"})

FanOut = Callable[[Fired], Awaitable[tuple[bool, str]]]
# suppress (tenant, address, reason, source) through the one suppression path, acknowledged
# (``streams.campaigns.controller.Controller.suppress``, wired by ``streams.worker``)
Suppress = Callable[[str, str, str, str], Awaitable[None]]
OPTED_OUT_SOURCE = "sms_opted_out"


class TenantRecords:
    """The tenants' records (SSRF allow-lists, granted senders, fires-per-second quotas), read
    from their compacted topic through one view started once however many runs ask at the same
    time (``streams.runtime.topic_view.StartedOnce``)."""

    def __init__(self, view: Callable[[], Any]) -> None:
        self._view = StartedOnce(view)
        self._warming: asyncio.Task[None] | None = None

    def warm(self) -> None:
        """Start the view now, in the background (on the running loop, once), rather than at
        the first run: the dispatcher reads quotas from it (``fires_per_s``) before any run."""
        if self._warming is None:
            self._warming = asyncio.get_running_loop().create_task(self._warm())

    async def _warm(self) -> None:
        try:
            await self._view.get()
        except Exception:  # noqa: BLE001 - the first run starts it again (StartedOnce.get)
            log.exception("the tenants view did not start; quotas are the schema's default "
                          "until a run starts it")

    def fires_per_s(self, tenant: str) -> int:
        """The tenant's ``max_fires_per_s`` as the view has it now, without waiting (the
        dispatcher's hot path): the schema's default while the view has not started or the
        tenant is not in it."""
        view = self._view.started
        record = view.get(tenant) if view is not None else None
        if record is None:
            return tenants.DEFAULT_FIRES_PER_S
        return int(record.get("max_fires_per_s", tenants.DEFAULT_FIRES_PER_S))

    async def record(self, tenant: str) -> Tenant | None:
        found: Tenant | None = (await self._view.get()).get(tenant)
        return found

    async def allowed(self, tenant: str) -> list[str]:
        """The tenant's SSRF allow-list."""
        record = await self.record(tenant)
        return list(record["allowed_targets"]) if record else []


class Targets:
    """The clients every kind of target is attempted with, made on first use inside the
    worker's event loop, and the one switch over the kinds (``attempt``)."""

    def __init__(self, fan_out: FanOut, emitter: Callable[[], Emitter], tenants: TenantRecords,
                 max_connections: int, resolver: dns.Resolver,
                 ses_client: Callable[[], Any], sms_client: Callable[[], Any],
                 region: Lease | None = None,
                 suppressions: SuppressionLookup | None = None,
                 suppress: Suppress | None = None) -> None:
        self.fan_out = fan_out  # a campaign's tick becomes its fan-out (streams.campaigns)
        # a number AWS answered is opted out joins the tenant's suppressions (``opted_out``)
        self._suppress = suppress
        self._emitter, self.tenants = emitter, tenants
        self.region = region or NoRegion()  # webhooks, emails and texts leave only under it
        self._max_connections, self._resolver = max_connections, resolver
        self._ses_client, self._sms_client = ses_client, sms_client
        # every reminder email and text checks its address here first (the worker's view of the
        # suppressions topic), handed in rather than set on the module when the worker wires
        self._suppressions = suppressions
        self._client: WebhookClient | None = None
        self._ses: Any = None
        self._sms: Any = None

    async def opted_out(self, fired: Fired, result: CallResult) -> None:
        """A text refused because its number is on AWS's opt-out list (a STOP AWS handled, or
        one texted before the account's two-way messages reached cronstream): the tenant's
        suppressions learn it, so ``GET /v1/suppressions`` shows why its texts stop and the next
        one is refused here without a request. A failure to write it is logged, not the run's:
        the text was not sent either way, and the next refusal writes it again."""
        if self._suppress is None:
            return
        number = fired["target"]["sms_to"] or ""
        try:
            await self._suppress(fired["tenant"], number, f"AWS opt-out list: {result.error}",
                                 OPTED_OUT_SOURCE)
        except Exception:  # noqa: BLE001 - logged with its ids; the run's outcome stands
            log.exception("tenant %s job %s fire %s: %s is on AWS's opt-out list; its "
                          "suppression was not written", fired["tenant"], fired["job_id"],
                          fired["fire_id"], number)

    @property
    def client(self) -> WebhookClient:
        if self._client is None:
            self._client = WebhookClient(self._max_connections, self._resolver.resolve)
        return self._client

    async def attempt(self, fired: Fired) -> CallResult:
        """One attempt at the slot's target (retries are the executor's)."""
        kind = fired["target"]["type"]
        if kind == "webhook":
            return await call_webhook(self.client, fired,
                                      await self.tenants.allowed(fired["tenant"]), self.region)
        if kind == "campaign":
            ok, note = await self.fan_out(fired)
            return CallResult(ok, None, None if ok else note, note=note)
        if kind == "kafka":
            return await produce_record(self._emitter(), fired)
        if kind == "email":
            if self._ses is None:
                self._ses = self._ses_client()
            return await asyncio.to_thread(send_email, self._ses, fired,
                                           await self.tenants.record(fired["tenant"]),
                                           self.region, self._suppressions)
        if kind == "sms":
            if self._sms is None:
                self._sms = self._sms_client()
            result = await asyncio.to_thread(send_text, self._sms, fired,
                                             await self.tenants.record(fired["tenant"]),
                                             self.region, self._suppressions)
            if result.opted_out:
                await self.opted_out(fired, result)
            return result
        return CallResult(False, None, f"unknown target type {kind!r}", final=True)
