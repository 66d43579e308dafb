"""Runs one attempt of a slot against its target: an HTTP webhook, a Kafka record or an email.

Webhooks carry the fire id (``X-Cronstream-Fire-Id``) so receivers can dedupe our at-least-once
delivery; redirects are never followed (a redirect could lead past the SSRF guard). A webhook's
host is resolved once, asynchronously (``streams.adapters.dns``), every address checked
(``streams.execution.ssrf.vet``), and the connection made to one of those addresses with the
URL's own Host header and TLS server name: the client's connector cannot resolve a name at all,
so no second lookup can send the call elsewhere (DNS rebinding, issue 40). Of the answer only
the status is used, and at most ``MAX_RESPONSE_BYTES`` of its body are read. The client is
aiohttp's: on this box it spent 0.09 ms of CPU a request against httpx's 2.18 ms
(docs/performance.md, "Webhook runs"), and a spike's runs are that cost a hundred thousand times.
Kafka targets may only write topics under the tenant's own prefix (``<tenant>.``), so a job can
never write cronstream's own topics or another tenant's.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from streams.adapters import dns, ses, tenants
from streams.execution import ssrf, suppressed
from streams.runtime.emit import Emitter
from streams.topology import TopicSpec

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


def headers_for(fired: dict[str, Any]) -> dict[str, str]:
    nominal = datetime.fromtimestamp(fired["nominal_ms"] / 1000, tz=UTC).isoformat()
    return {FIRE_ID_HEADER: fired["fire_id"], NOMINAL_TIME_HEADER: nominal}


DEFAULT_TIMEOUT_S = 10.0
# what is read of a webhook's answer, to let its connection be reused; a longer body closes the
# connection instead: a tenant's server streaming gigabytes into each of the executor's calls
# in flight cost its memory and time (issue 40)
MAX_RESPONSE_BYTES = 64 * 1024


class VettedAddressesOnly(AbstractResolver):
    """The webhook connector's resolver: it resolves nothing. Every call is made to an address
    ``ssrf.vet`` checked, so a host name reaching the connector is a bug, refused rather than
    handed to ``getaddrinfo`` (which would block the loop and could answer differently)."""

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        raise OSError(f"webhook connections go to vetted addresses only, not to {host!r}")

    async def close(self) -> None:
        return None


def new_session(max_connections: int) -> aiohttp.ClientSession:
    """The webhook client (create it inside the event loop that uses it): no cookies kept
    between tenants' calls, bodies left as sent, no names resolved (``VettedAddressesOnly``);
    per-host limits are the dispatcher's (``streams.execution.dispatch``), not the connector's.
    Pooled connections are keyed by address, port and TLS server name, so a connection is
    reused only for a call vetted for that very address."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=max_connections, limit_per_host=0,
                                       resolver=VettedAddressesOnly(), use_dns_cache=False),
        cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False)


_resolver: dns.Resolver | None = None


def default_resolver() -> dns.Resolver:
    """The process's resolver for webhook hosts, made on first use with the settings' timeout
    (``CRONSTREAM_DNS_TIMEOUT_S``); a caller with its own passes it to ``call_webhook``."""
    global _resolver
    if _resolver is None:
        from streams.runtime import settings

        _resolver = dns.Resolver(settings.load().dns_timeout_s)
    return _resolver


def host_of(target: dict[str, Any]) -> str:
    """What a slot's run is limited per (``streams.execution.dispatch``): a webhook's scheme,
    host and port; every other kind of target shares one lane per kind."""
    if target["type"] != "webhook":
        return str(target["type"])
    try:
        url = urlsplit(target["url"])
        return f"{url.scheme}://{url.hostname}:{url.port or ''}"
    except ValueError:
        return "webhook:invalid"  # refused by the SSRF check when it runs


@dataclass(frozen=True)
class Pinned:
    """How to call a vetted URL at one of its addresses: the URL with the address as its host,
    the Host header and the TLS server name the URL's own host gives."""

    url: URL
    host_header: str
    server_hostname: str | None


def pinned(vetted: ssrf.Vetted) -> Pinned:
    """The URL's host replaced by its first vetted address (an IP literal is left as it is)."""
    url = URL(vetted.url)
    host = url.raw_host or ""
    header = f"[{host}]" if ":" in host else host
    if url.explicit_port is not None and not url.is_default_port():
        header += f":{url.port}"
    if dns.literal(host) is not None:
        return Pinned(url, header, None)
    return Pinned(url.with_host(vetted.addresses[0]), header,
                  host if url.scheme == "https" else None)


async def _drain(response: aiohttp.ClientResponse, limit: int) -> None:
    """Read up to ``limit`` bytes of the answer: all of it (its connection goes back to the
    pool) or, past the limit, none more (the connection is closed)."""
    seen = 0
    while seen <= limit:
        chunk = await response.content.readany()
        if not chunk:
            return
        seen += len(chunk)
    response.close()


async def call_webhook(client: aiohttp.ClientSession, fired: dict[str, Any],
                       allowed: list[str], resolver: dns.Resolver | None = None) -> CallResult:
    target = fired["target"]
    try:
        vetted = await ssrf.vet(target["url"], allowed, (resolver or default_resolver()).resolve)
    except ssrf.TargetRefused as exc:
        return CallResult(False, None, f"target refused: {exc}", final=not exc.transient)
    to = pinned(vetted)
    headers = {**(target.get("headers") or {}), **headers_for(fired), "Host": to.host_header}
    body = target.get("body")
    timeout = aiohttp.ClientTimeout(total=target.get("timeout_s") or DEFAULT_TIMEOUT_S)
    try:
        async with client.request(target.get("method") or "POST", to.url, headers=headers,
                                  data=body.encode() if body is not None else None,
                                  timeout=timeout, allow_redirects=False,
                                  server_hostname=to.server_hostname) as response:
            status = response.status
            await _drain(response, MAX_RESPONSE_BYTES)
    except TimeoutError:
        return CallResult(False, None, f"timed out after {timeout.total} s")
    except aiohttp.ClientError as exc:
        return CallResult(False, None, f"{type(exc).__name__}: {exc}"[:500])
    except ValueError as exc:  # a request aiohttp will not make (a header with a newline, ...)
        return CallResult(False, None, f"request refused: {exc}"[:500], final=True)
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


async def produce_record(emitter: Emitter, fired: dict[str, Any]) -> CallResult:
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


_suppressions: SuppressionLookup | None = None


def consult_suppressions(lookup: SuppressionLookup | None) -> None:
    """Make every reminder email check its address first (``streams.execution.suppressed``;
    the worker sets it, a test or benchmark without a broker leaves it unset)."""
    global _suppressions
    _suppressions = lookup


def send_email(ses_client: Any, fired: dict[str, Any], tenant: dict[str, Any] | None
               ) -> CallResult:
    """One SES attempt for a reminder (blocking: run it in a thread), unless its sender is not
    one the operator granted ``tenant`` (its record as the tenants view has it now: a revoked
    sender stops the next send; ``streams.adapters.tenants.mail_refused``) or its address is
    suppressed for the tenant: the same opt-outs, bounces and complaints as campaigns honour,
    checked after the executor's intent and before SES, so at-most-once is unchanged. Either
    is a final failure naming why (nothing was sent, and retrying cannot help until the grant
    or the suppression changes); a tenant not read yet is retried."""
    target = fired["target"]
    if tenant is None:
        return CallResult(False, None, f"tenant {fired['tenant']} not in the tenants view yet; "
                          "not sent")
    if (refused := tenants.mail_refused(tenant, target["email_from"] or "")) is not None:
        return CallResult(False, None, f"not sent: {refused[1]}", final=True,
                          note="not sent: sender not granted")
    if _suppressions is not None:
        try:
            found = _suppressions.of(fired["tenant"], target["email_to"])
        except suppressed.ViewBehind as exc:
            return CallResult(False, None, str(exc))
        if found is not None:
            return CallResult(False, None, f"suppressed: {target['email_to']} is suppressed for "
                              f"the tenant ({found['reason']}); not sent", final=True,
                              note="not sent: address suppressed")
    result = ses.send_one(ses_client, sender=target["email_from"], to=target["email_to"],
                          subject=target["subject"] or "", text=target["text"],
                          html=target["html"], headers=headers_for(fired),
                          configuration_set=ses.configuration_set(fired["tenant"]),
                          tags={ses.TENANT_TAG: fired["tenant"], ses.FIRE_TAG: fired["fire_id"]})
    if result.outcome is ses.Outcome.SENT:
        return CallResult(True, None, None, message_id=result.message_id)
    return CallResult(False, None, f"{result.outcome.value}: {result.error}",
                      final=result.outcome in (ses.Outcome.PERMANENT, ses.Outcome.UNKNOWN),
                      unknown=result.outcome is ses.Outcome.UNKNOWN)
