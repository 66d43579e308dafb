"""One webhook attempt against a loopback server (``streams.execution.targets``): the vetted
address dialled under the URL's host name, the answer's size cap, the region's lease checked up to
the write. Integration tests (a real socket; no stack needed): the attempts' refusals that need no
server are unit tests (tests/unit/execution/test_targets.py), whose helpers these share."""

from __future__ import annotations

import asyncio

from streams.execution import targets
from streams.execution.webhook_client import WebhookClient
from tests.unit.execution.test_targets import Named, fired


def serve(handler):
    """Run ``handler(reader, writer)`` as a loopback server for one attempt of ``call_named``."""
    async def run(record, allowed, resolver):
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        record["target"]["url"] = record["target"]["url"].replace("PORT", str(port))
        client = WebhookClient(4, resolver.resolve)
        try:
            return await targets.call_webhook(client, record, allowed)
        finally:
            client.close()
            server.close()
    return run


def test_a_named_host_is_called_at_the_vetted_address_with_its_own_host_header():
    seen: list[bytes] = []

    async def handler(reader, writer):
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    resolver = Named("127.0.0.1")
    result = asyncio.run(serve(handler)(fired("http://hook.test:PORT/h?a=1"), ["127.0.0.1"],
                                        resolver))
    assert result.ok and result.status_code == 204, result
    assert resolver.asked == ["hook.test"], "resolved once, by the check"
    head = seen[0].decode()
    assert head.startswith("POST /h?a=1 HTTP/1.1") and "\r\nHost: hook.test:" in head, head


def test_an_answer_that_never_ends_is_read_only_up_to_the_cap():
    async def endless(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        try:
            while True:
                writer.write(b"10000\r\n" + b"x" * 0x10000 + b"\r\n")
                await writer.drain()
        except (ConnectionError, OSError):
            pass

    record = fired("http://127.0.0.1:PORT/h")
    record["target"]["timeout_s"] = 5.0
    result = asyncio.run(serve(endless)(record, ["127.0.0.1"], Named("127.0.0.1")))
    assert result.ok and result.status_code == 200, result


def serve_under(handler, lease):
    """``serve``, the attempt made under a region's ``lease`` (tests.unit.fakes.Lease)."""
    async def run(record, allowed):
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        record["target"]["url"] = record["target"]["url"].replace("PORT", str(port))
        client = WebhookClient(4, Named("127.0.0.1").resolve)
        try:
            return await targets.call_webhook(client, record, allowed, lease)
        finally:
            client.close()
            server.close()
    return run


def recording(seen: list[bytes]):
    async def handler(reader, writer):
        seen.append(await reader.read(65536))  # b"": connected, nothing written
        if seen[-1]:
            writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
        writer.close()
    return handler


def test_a_webhook_carries_its_regions_epoch_and_leaves_only_under_the_lease():
    from tests.unit.fakes import Lease

    seen: list[bytes] = []
    result = asyncio.run(serve_under(recording(seen), Lease(epoch=3))(
        fired("http://127.0.0.1:PORT/h"), ["127.0.0.1"]))
    assert result.ok, result
    assert "\r\nX-Cronstream-Region-Epoch: 3\r\n" in seen[0].decode()
    # no lease: nothing dialled, nothing sent, and the attempt says why (it does not count)
    seen.clear()
    result = asyncio.run(serve_under(recording(seen), Lease(epoch=None))(
        fired("http://127.0.0.1:PORT/h"), ["127.0.0.1"]))
    assert result.lease_lost and not result.ok and seen == []


def test_a_lease_ending_while_the_connection_is_made_sends_nothing():
    from tests.unit.fakes import Lease

    seen: list[bytes] = []
    # the first check passes (before resolving), the one right before the write does not
    result = asyncio.run(serve_under(recording(seen), Lease(epoch=3, checks_left=1))(
        fired("http://127.0.0.1:PORT/h"), ["127.0.0.1"]))
    assert result.lease_lost and not result.ok
    assert b"".join(seen) == b"", "the request left after the lease ended"
