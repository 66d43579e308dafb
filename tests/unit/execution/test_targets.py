"""One webhook attempt's refusals that need no server (streams.execution.targets)."""

from __future__ import annotations

import asyncio

from streams.execution import targets
from streams.execution.webhook_client import WebhookClient


def fired(url: str, headers: dict[str, str] | None = None) -> dict:
    return {"fire_id": "j@2026-01-01T00:00:00Z", "nominal_ms": 0, "tenant": "t",
            "target": {"type": "webhook", "url": url, "method": "POST",
                       "headers": headers or {}, "body": None, "timeout_s": 1.0}}


def call(record: dict, allowed: list[str]) -> targets.CallResult:
    """One attempt, with a listener on loopback (it accepts and never answers) where the record's
    URL says ``PORT``."""
    async def run() -> targets.CallResult:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        record["target"]["url"] = record["target"]["url"].replace("PORT", str(port))
        client = WebhookClient(4)
        try:
            return await targets.call_webhook(client, record, allowed)
        finally:
            client.close()
            server.close()
    return asyncio.run(run())


def test_a_request_the_client_will_not_make_is_a_final_failure_not_an_exception():
    result = call(fired("http://127.0.0.1:PORT/h", {"X-Bad": "a\nb"}), ["127.0.0.1"])
    assert not result.ok and result.final and result.error.startswith("request refused")


def test_a_refused_target_is_final():
    result = call(fired("http://127.0.0.1:PORT/h"), [])
    assert not result.ok and result.final and "target refused" in result.error


def test_runs_are_limited_per_scheme_host_and_port_and_other_targets_share_a_lane():
    assert targets.host_of({"type": "webhook", "url": "https://a.example:8443/x"}) \
        == "https://a.example:8443"
    assert targets.host_of({"type": "webhook", "url": "http://a.example/x"}) == "http://a.example:"
    assert targets.host_of({"type": "kafka"}) == "kafka"


class Named:
    """A resolver that answers every name with the given addresses and counts the questions."""

    def __init__(self, *addresses: str) -> None:
        self.addresses, self.asked = list(addresses), []

    async def resolve(self, host: str) -> list[str]:
        self.asked.append(host)
        return list(self.addresses)


def test_the_urls_host_is_the_host_header_and_tls_name_whatever_address_is_dialled():
    from streams.execution.webhook_client import request_bytes, target_of

    target = target_of("https://Hook.Example:8443/p%20q?x=1")
    assert (target.scheme, target.host, target.port) == ("https", "hook.example", 8443)
    head = request_bytes("POST", target, {}, None)
    assert head.startswith(b"POST /p%20q?x=1 HTTP/1.1\r\nHost: hook.example:8443\r\n")
    target = target_of("http://[::1]:81/")
    assert (target.host, target.port) == ("::1", 81)
    assert b"\r\nHost: [::1]:81\r\n" in request_bytes("POST", target, {}, None)


def test_a_kafka_target_writes_only_the_tenants_own_topics_never_cronstreams():
    assert targets.tenant_topic_allowed("acme", "acme.events")
    for tenant, topic in (("acme", "other.events"), ("acme", "acme."), ("acme", "acmex.y"),
                          ("cronstream", "cronstream.jobs"), ("cronstream", "cronstream.ledger")):
        assert not targets.tenant_topic_allowed(tenant, topic), (tenant, topic)
