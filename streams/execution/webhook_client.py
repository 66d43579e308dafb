"""The executor's HTTP/1.1 client for webhooks: one request, one pooled keep-alive connection,
the response's status; nothing a webhook does not need.

Why not aiohttp: a draining worker spent 0.12-0.13 ms of CPU a request in it (its request and
response objects, its writer's several writes a request, its timeout and trace machinery),
a third of what a whole run cost the box; this client spent 0.012-0.026 ms against the same
receiver (uvloop, asyncio; docs/performance.md, "Webhook runs"). The request is one write, the
response is parsed by httptools (llhttp, the parser Node.js uses), its body is read only to keep
the connection and never kept.

What it guarantees a multi-tenant service needs:

- the address is vetted once and pinned: the host is resolved off the event loop (with a
  timeout: a name server that never answers costs the slot its timeout, not the worker its
  loop: ``streams.adapters.dns``), every address is checked (``ssrf.vet``), and the connection
  goes to the first,
  with the URL's host as TLS server name and ``Host``: a second, rebound answer is never
  asked for. Pooled connections belong to one (scheme, host, port, address);
- no redirects are followed (a 3xx is an answer like any other), a body longer than
  ``MAX_BODY`` is not read (its connection is closed), headers that could split the request
  (CR, LF, NUL, a name that is not a token) are refused, and the framing headers
  (``Content-Length``, ``Transfer-Encoding``, ``Connection``) are the client's alone;
- the whole attempt (resolving, connecting, TLS, the exchange) is bounded by the target's
  timeout, after which its connection is closed.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import cast
from urllib.parse import urlsplit

import httptools

from streams.adapters import dns
from streams.execution import ssrf

MAX_BODY = 64 * 1024  # response bytes read at most; past this the connection is closed
IDLE_S = 30.0  # a kept-alive connection idle longer than this is closed, not reused
RESOLVED_FOR_S = 10.0  # how long a host's addresses are reused before it is resolved again
USER_AGENT = "cronstream"
# framing is the client's: a tenant's header of these names is dropped (request smuggling)
FRAMING = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive", "upgrade"})
TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")

Resolver = Callable[[str], Awaitable[list[str]]]


class Unanswered(ConnectionError):
    """The connection closed before the answer began (``answered`` False) or in its middle."""

    def __init__(self, message: str, answered: bool) -> None:
        super().__init__(message)
        self.answered = answered


class RequestRefused(ValueError):
    """A request that cannot be made as given (a header that could split it, a URL without a
    host): retrying cannot help."""


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a connection goes: the URL's scheme, host and port, and the vetted address."""

    scheme: str
    host: str
    port: int
    address: str


@dataclass(frozen=True, slots=True)
class Request:
    origin: Origin
    head: bytes  # request line and headers, ending in the blank line
    body: bytes
    no_body_back: bool  # HEAD: the answer's Content-Length announces no bytes


@dataclass(frozen=True, slots=True)
class Target:
    """What a request needs of its URL, parsed once per URL (``target_of``)."""

    scheme: str
    host: str
    port: int
    path: str  # the request target: path and query
    host_line: str  # the Host header's value


@lru_cache(maxsize=65_536)
def target_of(url: str) -> Target:
    """The URL's scheme, host, port, request target and Host value, or RequestRefused. A
    spike's calls share a handful of URLs: parsed once each, not a hundred thousand times."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise RequestRefused(f"URL {url!r}: {exc}") from exc
    if parts.scheme not in ("http", "https"):
        raise RequestRefused(f"scheme {parts.scheme!r} is not http or https")
    host = parts.hostname
    if not host:
        raise RequestRefused("URL has no host")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if any(c in path for c in " \r\n\0"):
        raise RequestRefused("the URL's path holds a space or a control character")
    default = 443 if parts.scheme == "https" else 80
    shown = f"[{host}]" if ":" in host else host.encode("idna").decode("ascii")
    return Target(parts.scheme, host, port, path, shown + (f":{port}" if port != default else ""))


def request_bytes(method: str, target: Target, headers: dict[str, str], body: bytes | None,
                  ours: dict[str, str] | None = None) -> bytes:
    """The request's head, or RequestRefused for a method or a header that could split it.
    ``headers`` are the tenant's (checked, framing dropped, Host may be overridden); ``ours``
    are cronstream's own (the fire id and nominal time: known to be safe). Pure."""
    if not TOKEN.match(method):
        raise RequestRefused(f"method {method!r} is not an HTTP token")
    host_line = target.host_line
    lines = [f"{method} {target.path} HTTP/1.1", ""]
    agent = True
    for name, value in headers.items():
        if not TOKEN.match(name):
            raise RequestRefused(f"header name {name!r} is not an HTTP token")
        if "\r" in value or "\n" in value or "\0" in value:
            raise RequestRefused(f"header {name}'s value holds a line break or NUL")
        lowered = name.lower()
        if lowered == "host":
            host_line = value
        elif lowered not in FRAMING:
            agent = agent and lowered != "user-agent"
            lines.append(f"{name}: {value}")
    lines[1] = f"Host: {host_line}"
    if agent:
        lines.append(f"User-Agent: {USER_AGENT}")
    if ours:
        lines.extend(f"{name}: {value}" for name, value in ours.items())
    lines.append(f"Content-Length: {len(body) if body else 0}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class _Connection(asyncio.Protocol):
    """One keep-alive connection: at most one exchange at a time."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.answer: asyncio.Future[int] | None = None
        self.status = 0
        self.body_read = 0
        self.reusable = False
        self.no_body_back = False
        self.answered = False  # a byte of the answer came
        self.reused = False  # taken from the pool (it served an exchange before)
        self.idle_since = 0.0

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: the type is only a promise
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.answered = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ConnectionError("the server switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(ConnectionError(f"malformed answer: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.status >= 200 and exc is None:
            # an answer whose body runs to the end of the connection (HTTP/1.0, or no length
            # given): its end is the close, and its status is all that was wanted
            self._done(reusable=False)
            return
        why = "" if exc is None else f": {type(exc).__name__}: {exc}"
        self._fail(Unanswered(f"the connection closed before the answer{why}", self.answered))

    # httptools' callbacks
    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if self.no_body_back and self.status >= 200:
            self._done(reusable=False)  # never parse a body that will not come

    def on_body(self, body: bytes) -> None:
        self.body_read += len(body)
        if self.body_read > MAX_BODY:
            self._done(reusable=False)  # the status is known; the rest is not read

    def on_message_complete(self) -> None:
        if 100 <= self.status < 200:
            return  # an interim answer (100 Continue): the final one follows
        self._done(reusable=self.parser.should_keep_alive())

    # the exchange
    async def exchange(self, request: Request) -> int:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self.answer = loop.create_future()
        self.status, self.body_read, self.reusable, self.answered = 0, 0, False, False
        self.no_body_back = request.no_body_back
        self.transport.write(request.head + request.body if request.body else request.head)
        return await self.answer

    def _done(self, reusable: bool) -> None:
        """The answer is known: once (a long body's cut and its message's end both say so)."""
        answer, self.answer = self.answer, None
        if answer is None or answer.done():
            return
        self.reusable = reusable
        answer.set_result(self.status)

    def _fail(self, exc: Exception) -> None:
        self.reusable = False
        answer, self.answer = self.answer, None
        if answer is not None and not answer.done():
            answer.set_exception(exc)

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()


class WebhookClient:
    """Keep-alive connections per ``Origin``, at most ``max_idle`` of them idle; the resolver
    and TLS context are passed in (tests pass their own)."""

    def __init__(self, max_idle: int, resolver: Resolver | None = None,
                 tls: ssl.SSLContext | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``resolver``: a host's addresses, off the event loop (``streams.adapters.dns``'s by
        default, with its default timeout)."""
        self.max_idle = max_idle
        self.resolver = resolver or dns.Resolver().resolve
        self.clock = clock
        self._tls = tls
        self._idle: dict[Origin, list[_Connection]] = {}
        self._idle_count = 0
        self._resolved: dict[tuple[str, tuple[str, ...]], tuple[float, str]] = {}

    @property
    def tls(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    async def request(self, method: str, url: str, headers: dict[str, str], body: bytes | None,
                      allowed: Iterable[str], ours: dict[str, str] | None = None,
                      before_send: Callable[[], object] | None = None) -> int:
        """The answer's status. Raises ``ssrf.TargetRefused`` (the address is not allowed),
        ``RequestRefused`` (the request cannot be made), ``OSError``/``ConnectionError`` (the
        exchange failed); the caller bounds it in time (``asyncio.timeout``). ``headers`` are
        the tenant's, ``ours`` cronstream's own (``request_bytes``). ``before_send`` is called
        once the connection is ready, right before the request is written (the region's lease:
        ``streams.runtime.authority``); what it raises, the call raises, with nothing sent."""
        target = target_of(url)
        head = request_bytes(method, target, headers, body, ours)
        address = await self._vetted(url, target.host, tuple(allowed))
        request = Request(Origin(target.scheme, target.host, target.port, address), head,
                          body or b"", method.upper() == "HEAD")
        connection = await self._checkout(request.origin)
        if before_send is not None:
            try:
                before_send()
            except BaseException:
                self._checkin(connection)
                raise
        try:
            status = await connection.exchange(request)
        except Unanswered as exc:
            connection.close()
            if not connection.reused or exc.answered:
                raise
            # a kept-alive connection the server had closed while it was idle (the close
            # crossed our request): asked again once, on a new connection, as HTTP clients do
            connection = await self._checkout(request.origin, fresh=True)
            try:
                if before_send is not None:
                    before_send()
                status = await connection.exchange(request)
            except BaseException:
                connection.close()
                raise
        except BaseException:
            connection.close()
            raise
        self._checkin(connection)
        return status

    async def _vetted(self, url: str, host: str, allowed: tuple[str, ...]) -> str:
        """The address to dial: ``ssrf.vet``'s first, its answer and verdict reused for
        ``RESOLVED_FOR_S`` per host and allow-list (a spike calls one host a hundred thousand
        times a minute: resolving and checking each time cost more than the call). Within that
        time every call goes to the address that was checked; after it, the host is asked and
        checked again."""
        key = (host, allowed)
        cached = self._resolved.get(key)
        now = self.clock()
        if cached is not None and cached[0] > now:
            return cached[1]
        vetted = await ssrf.vet(url, allowed, self.resolver)
        if len(self._resolved) > 10_000:
            self._resolved.clear()
        self._resolved[key] = (now + RESOLVED_FOR_S, vetted.addresses[0])
        return vetted.addresses[0]

    async def _checkout(self, origin: Origin, fresh: bool = False) -> _Connection:
        idle = None if fresh else self._idle.get(origin)
        now = self.clock()
        while idle:
            connection = idle.pop()
            self._idle_count -= 1
            if connection.transport is not None and not connection.transport.is_closing() \
                    and now - connection.idle_since < IDLE_S:
                connection.reused = True
                return connection
            connection.close()
        loop = asyncio.get_running_loop()
        tls = self.tls if origin.scheme == "https" else None
        _, connection = await loop.create_connection(
            lambda: _Connection(origin), origin.address, origin.port, ssl=tls,
            server_hostname=origin.host if tls is not None else None)
        return connection

    def _checkin(self, connection: _Connection) -> None:
        if not connection.reusable or connection.transport is None:
            connection.close()
            return
        if self._idle_count >= self.max_idle:  # the pool is full: the oldest idle one goes
            oldest = min((c for conns in self._idle.values() for c in conns),
                         key=lambda c: c.idle_since, default=None)
            if oldest is not None:
                self._idle[oldest.origin].remove(oldest)
                self._idle_count -= 1
                oldest.close()
        connection.idle_since = self.clock()
        self._idle.setdefault(connection.origin, []).append(connection)
        self._idle_count += 1

    def close(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()
        self._idle_count = 0
