"""The executor's HTTP/1.1 client (``streams.execution.webhook_client``) against real sockets: a
server on loopback in the test, answering what each test scripts."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from streams.execution import ssrf, targets
from streams.execution.webhook_client import (
    MAX_BODY,
    RESOLVED_FOR_S,
    RequestRefused,
    WebhookClient,
    request_bytes,
    target_of,
)

Answer = Callable[[bytes], bytes | None]  # a request's bytes -> the answer (None: never answer)


class Server:
    """Counts connections and keeps every request's bytes; answers each with ``answer``."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []
        self.port = 0

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                answer = self.answer(request)
                if answer is None:
                    await asyncio.sleep(3600)
                writer.write(answer)
                await writer.drain()
                if b"connection: close" in answer.lower():
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client went, or the test ended
        finally:
            writer.close()


def run(answer: Answer, scenario: Callable[[Server, WebhookClient], Awaitable[object]],
        loops: tuple[str, ...] = ("asyncio", "uvloop"), **client: object) -> object:
    """The scenario on asyncio's loop and on uvloop's (the workers' by default, whose transports
    are not asyncio's classes); both must give the same result, which is returned."""
    async def main() -> object:
        async with Server(answer) as server:
            web = WebhookClient(8, **client)
            try:
                return await scenario(server, web)
            finally:
                web.close()
    runners = {"asyncio": asyncio.run, "uvloop": uvloop.run}
    results = [runners[name](main()) for name in loops]
    assert all(result == results[0] for result in results), results
    return results[0]


def no_content(_: bytes) -> bytes:
    return b"HTTP/1.1 204 No Content\r\n\r\n"


LOOPBACK = ["127.0.0.1"]


def test_one_connection_serves_request_after_request_each_one_write():
    async def scenario(server: Server, web: WebhookClient) -> list[int]:
        url = f"http://127.0.0.1:{server.port}/hook?x=1"
        return [await web.request("POST", url, {"X-A": "b"}, b"hi", LOOPBACK) for _ in range(3)]

    server_seen: list[Server] = []

    async def keep(server: Server, web: WebhookClient) -> list[int]:
        server_seen.append(server)
        return await scenario(server, web)

    assert run(no_content, keep) == [204, 204, 204]
    server = server_seen[0]
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /hook?x=1 HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"\r\nX-A: b\r\n" in first and first.endswith(b"Content-Length: 2\r\n\r\nhi")


def test_the_framing_is_the_clients_and_a_header_that_splits_the_request_is_refused():
    target = target_of("http://h.example/p")
    head = request_bytes("POST", target, {
        "Content-Length": "99", "Transfer-Encoding": "chunked", "Connection": "close",
        "Host": "virtual.example"}, b"abc", {"X-Cronstream-Fire-Id": "j@t"})
    assert head.count(b"Content-Length") == 1 and b"Content-Length: 3" in head
    assert b"chunked" not in head and b"close" not in head
    assert b"\r\nHost: virtual.example\r\n" in head and b"\r\nX-Cronstream-Fire-Id: j@t\r\n" in head
    for bad in ({"X-Bad": "a\r\nX-Evil: 1"}, {"X Bad": "v"}, {"X-Nul": "a\0b"}):
        with pytest.raises(RequestRefused):
            request_bytes("POST", target, bad, None)
    with pytest.raises(RequestRefused):
        target_of("ftp://h.example/p")
    with pytest.raises(RequestRefused):
        request_bytes("GET /x HTTP/1.1\r\n", target, {}, None)
    https = target_of("https://h.example/")
    assert https.port == 443 and b"\r\nHost: h.example\r\n" in request_bytes("GET", https, {}, None)


def test_a_redirect_is_an_answer_not_followed():
    def redirect(_: bytes) -> bytes:
        return b"HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/\r\nContent-Length: 0\r\n\r\n"

    async def scenario(server: Server, web: WebhookClient) -> tuple[int, int]:
        status = await web.request("POST", f"http://127.0.0.1:{server.port}/", {}, None, LOOPBACK)
        return status, len(server.requests)

    assert run(redirect, scenario) == (302, 1)


def test_a_chunked_answer_is_read_and_its_connection_kept_a_long_one_is_not():
    big = b"x" * (MAX_BODY + 1)

    def answers(request: bytes) -> bytes:
        if b"/big" in request:
            return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(big), big)
        return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"

    async def scenario(server: Server, web: WebhookClient) -> tuple[list[int], int]:
        base = f"http://127.0.0.1:{server.port}"
        statuses = [await web.request("POST", base + path, {}, None, LOOPBACK)
                    for path in ("/chunked", "/chunked", "/big", "/chunked")]
        return statuses, server.connections

    statuses, connections = run(answers, scenario)
    assert statuses == [200, 200, 200, 200]
    assert connections == 2, "the long answer's connection was closed, not read to its end"


def test_a_connection_the_server_closes_is_not_reused_and_head_never_waits_for_a_body():
    def close(request: bytes) -> bytes:
        if request.startswith(b"HEAD"):
            return b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"
        return b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"

    async def scenario(server: Server, web: WebhookClient) -> tuple[list[int], int]:
        url = f"http://127.0.0.1:{server.port}/"
        statuses = [await web.request("POST", url, {}, None, LOOPBACK) for _ in range(2)]
        async with asyncio.timeout(5):
            statuses.append(await web.request("HEAD", url, {}, None, LOOPBACK))
        return statuses, server.connections

    assert run(close, scenario) == ([200, 200, 200], 3)


def test_an_interim_answer_is_skipped():
    def interim(_: bytes) -> bytes:
        return b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"

    async def scenario(server: Server, web: WebhookClient) -> int:
        return await web.request("POST", f"http://127.0.0.1:{server.port}/", {}, None, LOOPBACK)

    assert run(interim, scenario) == 201


def test_an_attempt_past_its_timeout_fails_and_its_connection_is_closed():
    async def scenario(server: Server, web: WebhookClient) -> tuple[targets.CallResult, int]:
        fired = {"fire_id": "j@2026-01-01T00:00:00Z", "nominal_ms": 0, "tenant": "t",
                 "target": {"type": "webhook", "url": f"http://127.0.0.1:{server.port}/",
                            "method": "POST", "headers": {}, "body": None, "timeout_s": 0.2}}
        result = await targets.call_webhook(web, fired, LOOPBACK)
        return result, web._idle_count

    result, idle = run(lambda _: None, scenario)
    assert not result.ok and not result.final and result.error == "timed out after 0.2 s"
    assert idle == 0


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_name_is_resolved_once_vetted_and_its_address_pinned(loop):
    """DNS rebinding: a name that answers an allowed address first and an internal one next
    must never reach the second; the connection goes to the vetted address."""
    answers = [["127.0.0.1"], ["10.0.0.7"]]
    asked: list[str] = []

    async def resolver(host: str) -> list[str]:
        asked.append(host)
        return answers[min(len(asked) - 1, 1)]

    async def scenario(server: Server, web: WebhookClient) -> list[int]:
        url = f"http://hooks.example:{server.port}/"
        return [await web.request("POST", url, {}, None, ["hooks.example"]) for _ in range(3)]

    clock = [0.0]
    assert run(no_content, scenario, (loop,), resolver=resolver, clock=lambda: clock[0]) == [204] * 3
    assert asked == ["hooks.example"], "resolved again within its reuse window"

    async def later(server: Server, web: WebhookClient) -> str:
        url = f"http://hooks.example:{server.port}/"
        await web.request("POST", url, {}, None, ["127.0.0.1"])
        clock[0] += RESOLVED_FOR_S + 1  # the second answer: an internal address
        with pytest.raises(ssrf.TargetRefused, match="10.0.0.7"):
            await web.request("POST", url, {}, None, ["127.0.0.1"])
        return server.requests[0].split(b"\r\n")[1].decode()

    asked.clear()
    assert run(no_content, later, (loop,), resolver=resolver, clock=lambda: clock[0]).startswith(
        "Host: hooks.example:")


def test_an_internal_address_is_refused_unless_the_tenant_allows_it():
    async def scenario(server: Server, web: WebhookClient) -> int:
        url = f"http://127.0.0.1:{server.port}/"
        with pytest.raises(ssrf.TargetRefused):
            await web.request("POST", url, {}, None, [])
        return await web.request("POST", url, {}, None, ["127.0.0.0/8"])

    assert run(no_content, scenario) == 204


def test_an_answer_that_ends_with_its_connection_gives_its_status():
    """http.server's default: HTTP/1.0, no length, the body runs to the close."""
    def old_style(_: bytes) -> bytes:
        return b"HTTP/1.0 500 Internal Server Error\r\nServer: x\r\nConnection: close\r\n\r\noops"

    async def scenario(server: Server, web: WebhookClient) -> tuple[list[int], int]:
        url = f"http://127.0.0.1:{server.port}/"
        statuses = [await web.request("POST", url, {}, None, LOOPBACK) for _ in range(2)]
        return statuses, server.connections

    assert run(old_style, scenario) == ([500, 500], 2)


def test_a_kept_alive_connection_the_server_drops_is_asked_again_once_on_a_new_one():
    """The server closes a kept-alive connection just as the next request goes out on it (its
    keep-alive timeout): that request is made again on a new connection, once; a request whose
    connection closed in the middle of its answer is not."""
    class DropsSecond(Server):
        async def _serve(self, reader, writer):  # each connection answers one request only
            self.connections += 1
            served = False
            try:
                while True:
                    self.requests.append(await reader.readuntil(b"\r\n\r\n"))
                    if served:
                        break  # the second request on this connection: dropped unanswered
                    writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
                    await writer.drain()
                    served = True
            except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
                pass
            finally:
                writer.close()

    async def main() -> tuple[list[int], int, int]:
        async with DropsSecond(no_content) as server:
            web = WebhookClient(8)
            try:
                url = f"http://127.0.0.1:{server.port}/"
                statuses = [await web.request("POST", url, {}, None, LOOPBACK) for _ in range(2)]
                return statuses, server.connections, len(server.requests)
            finally:
                web.close()

    assert asyncio.run(main()) == ([204, 204], 2, 3)
