"""A webhook receiver for the benchmarks that costs as little CPU as possible, and the box's HTTP
ceiling measured against it.

    .venv/bin/python -m bench.receiver [--port 0] [--out FILE] [--delay-s 0]  # serve until SIGTERM
    .venv/bin/python -m bench.receiver --ceiling [--requests 20000]   # the box's HTTP ceiling

The server is an asyncio ``Protocol`` speaking just enough HTTP/1.1 for a webhook: keep-alive,
pipelined requests, ``Content-Length`` bodies (read and dropped; a chunked body is refused with
400), every request answered ``204 No Content`` with no header at all: at once, or ``--delay-s``
seconds after it arrived (a slow target; the answers of one connection still go out in request
order, and a connection that asked to be closed is closed after its last answer). Per request
it keeps the ``X-Cronstream-Fire-Id`` header's value and the arrival time (``time.time_ns()``
once per read, when the bytes that complete the request came in) in memory, and per path the
requests and the last arrival (a benchmark may point two kinds of jobs at one receiver, a path
each, and wait on one kind). It writes the fire ids and arrival times to a file when it stops
(SIGTERM, the ``stop`` command, or its stdin closing when it is a pipe: a benchmark that died
does not leave it behind) or on the ``dump`` command. It prints ``ready <host> <port>
loop=<uvloop|asyncio>`` once it listens, and runs on uvloop when it is installed.
Commands, one a line on stdin, each answered with one line on stdout:

    count       ->  count <requests> <last arrival ns, 0 if none>
    count PATH  ->  count <requests to PATH> <their last arrival ns, 0 if none>
    dump        ->  dumped <requests>           (the arrivals so far written to the file)
    stop        ->  stopped <requests>          (written, then the process ends)

The file: a first line ``# requests=N without_fire_id=M malformed=K``, then one line per request
that carried a fire id: ``<arrival ns> <fire id>``.

``Receiver`` runs it as a subprocess for a benchmark (start, wait ready, count, dump, stop and
read the arrivals, the process's CPU seconds from /proc). ``ceiling`` drives a receiver alone at
full speed with the executor's own client (``streams.execution.webhook_client``, each request
made by ``call_webhook``, on the default asyncio loop) and, for comparison, with aiohttp (the
executor's client before issue 39) and httpx (before issue 28): what no scheduler on this box
can pass, whatever it does.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import select
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FIRE_ID = b"x-cronstream-fire-id"
NO_CONTENT = b"HTTP/1.1 204 No Content\r\n\r\n"
BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
MAX_HEAD = 64 * 1024  # a request head longer than this is refused
HOOK = "/hook"  # the path of ``Receiver.url``

Call = Callable[[int], Awaitable[bool]]  # the i-th request of a ceiling run: True if it succeeded
# requests in flight in a ceiling run: a worker's runs in flight at most (the executor's
# MAX_IN_FLIGHT)
CONCURRENCY = 256


class BadRequest(ValueError):
    pass


@dataclass(frozen=True)
class Request:
    fire_id: bytes | None  # the X-Cronstream-Fire-Id header's value; None when it is missing
    close: bool  # the client asked for the connection to be closed after the answer
    path: bytes  # the request target, as sent


def parse_head(head: bytes) -> tuple[Request, int]:
    """A request head (request line and headers, without the blank line): the request and its
    body's length."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise BadRequest(f"not an HTTP/1.x request line: {lines[0][:80]!r}")
    close = parts[2] == b"HTTP/1.0"  # 1.0 closes unless it asks to keep the connection
    fire_id, length = None, 0
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon:
            raise BadRequest(f"not a header line: {line[:80]!r}")
        name = name.strip().lower()
        if name == FIRE_ID:
            fire_id = value.strip()
        elif name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                raise BadRequest(f"bad Content-Length: {value[:40]!r}") from None
            if length < 0:
                raise BadRequest(f"bad Content-Length: {length}")
        elif name == b"transfer-encoding":
            raise BadRequest("Transfer-Encoding is not supported (only Content-Length bodies)")
        elif name == b"connection":
            tokens = value.strip().lower()
            close = b"close" in tokens or (close and b"keep-alive" not in tokens)
    return Request(fire_id, close, parts[1]), length


class RequestParser:
    """Requests out of a connection's bytes, however they are split across reads: ``feed`` a
    read, get back the requests it completed (pipelined ones included), in order."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._body_left = 0  # bytes of the current request's body still to come
        self._pending: Request | None = None  # the request whose body is being read

    def feed(self, data: bytes) -> list[Request]:
        self._buffer += data
        done: list[Request] = []
        while True:
            if self._pending is not None:
                taken = min(self._body_left, len(self._buffer))
                del self._buffer[:taken]
                self._body_left -= taken
                if self._body_left:
                    return done
                done.append(self._pending)
                self._pending = None
            while self._buffer[:2] == b"\r\n":  # stray line ends between requests (RFC 9112 2.2)
                del self._buffer[:2]
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEAD:
                    raise BadRequest(f"request head longer than {MAX_HEAD} bytes")
                return done
            request, length = parse_head(bytes(self._buffer[:end]))
            del self._buffer[:end + 4]
            if length:
                self._pending, self._body_left = request, length
            else:
                done.append(request)


@dataclass
class Log:
    """What the receiver saw, kept as cheaply as it can be: two parallel lists."""
    fire_ids: list[bytes] = field(default_factory=list)
    arrived_ns: list[int] = field(default_factory=list)
    requests: int = 0
    without_fire_id: int = 0
    malformed: int = 0
    by_path: dict[bytes, list[int]] = field(default_factory=dict)  # path: [requests, last ns]

    def count(self, path: bytes | None = None) -> tuple[int, int]:
        """Requests (to ``path``, or all of them) and the last one's arrival ns (0: none)."""
        if path is None:
            return self.requests, self.arrived_ns[-1] if self.arrived_ns else 0
        requests, last_ns = self.by_path.get(path, (0, 0))
        return requests, last_ns

    def write(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as out:
            out.write(b"# requests=%d without_fire_id=%d malformed=%d\n"
                      % (self.requests, self.without_fire_id, self.malformed))
            out.writelines(b"%d %s\n" % pair for pair in zip(self.arrived_ns, self.fire_ids,
                                                                strict=True))
        tmp.replace(path)


Later = Callable[[float, Callable[[], None]], object]  # loop.call_later's shape


class ReceiverProtocol(asyncio.Protocol):
    """One connection. With ``delay_s``, each read's answers (a 400 included) are written that
    long after it came in, by a timer (``call_later``: the loop's, or a test's): every timer
    writes the oldest answers still owed, so the answers keep the requests' order even if timers
    due at the same time run in another order; after a request asking to close, nothing more is
    read."""

    def __init__(self, log: Log, delay_s: float = 0.0, call_later: Later | None = None) -> None:
        self.log = log
        self.parser = RequestParser()
        self.transport: asyncio.Transport | None = None
        self.delay_s = delay_s
        self._call_later = call_later
        self._owed: deque[tuple[bytes, bool]] = deque()  # delayed answers: (bytes, close after)
        self._closing = False  # the connection is to be closed once its answers are out

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.delay_s and self._call_later is None:
            self._call_later = asyncio.get_running_loop().call_later

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        try:
            requests = self.parser.feed(data)
        except BadRequest:
            self.log.malformed += 1
            self._answer(BAD_REQUEST, True)
            return
        if not requests:
            return
        at = time.time_ns()
        log, answered = self.log, 0
        for request in requests:
            answered += 1
            log.requests += 1
            if request.fire_id is None:
                log.without_fire_id += 1
            else:
                log.fire_ids.append(request.fire_id)
                log.arrived_ns.append(at)
            counts = log.by_path.get(request.path)
            if counts is None:
                log.by_path[request.path] = [1, at]
            else:
                counts[0] += 1
                counts[1] = at
            if request.close:
                break
        self._answer(NO_CONTENT * answered, requests[answered - 1].close)

    def _answer(self, answers: bytes, close: bool) -> None:
        """Write ``answers`` (and close after them if ``close``): now, or once the delay is over."""
        self._closing = self._closing or close
        if self.delay_s:
            assert self._call_later is not None
            self._owed.append((answers, close))
            self._call_later(self.delay_s, self._answer_owed)
        else:
            self._write(answers, close)

    def _answer_owed(self) -> None:
        """A delay is over: the oldest answers still owed go out."""
        answers, close = self._owed.popleft()
        assert self.transport is not None
        if not self.transport.is_closing():  # the client may have gone meanwhile
            self._write(answers, close)

    def _write(self, answers: bytes, close: bool) -> None:
        assert self.transport is not None
        self.transport.write(answers)
        if close:
            self.transport.close()


async def serve(host: str, port: int, out: Path, delay_s: float = 0.0) -> None:
    loop = asyncio.get_running_loop()
    log = Log()
    server = await loop.create_server(lambda: ReceiverProtocol(log, delay_s), host, port,
                                      backlog=4096)
    stopping = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    loop.add_signal_handler(signal.SIGINT, stopping.set)
    commands = asyncio.StreamReader()
    piped = stat.S_ISFIFO(os.fstat(sys.stdin.fileno()).st_mode)
    if piped:  # a starter's pipe: its commands
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
    # else run by hand (a terminal, /dev/null): SIGTERM or Ctrl-C only

    def say(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    async def obey() -> None:
        while line := await commands.readline():
            command, _, argument = line.decode().strip().partition(" ")
            if command == "count":
                requests, last_ns = log.count(argument.encode() if argument else None)
                say(f"count {requests} {last_ns}")
            elif command == "dump":
                log.write(out)
                say(f"dumped {log.requests}")
            elif command == "stop":
                break
            elif command:
                say(f"unknown command {command!r}")
        stopping.set()  # stop, or stdin closed: whoever started us is gone

    obeying = asyncio.ensure_future(obey() if piped else stopping.wait())
    bound = server.sockets[0].getsockname()
    say(f"ready {bound[0]} {bound[1]} loop={type(loop).__module__.split('.')[0]}")
    await stopping.wait()
    server.close()
    log.write(out)
    say(f"stopped {log.requests}")
    obeying.cancel()


def run_server(host: str, port: int, out: Path, delay_s: float = 0.0) -> None:
    try:
        import uvloop
    except ImportError:  # plain asyncio costs more CPU per request, but works
        asyncio.run(serve(host, port, out, delay_s))
    else:
        uvloop.run(serve(host, port, out, delay_s))


# -- for the benchmarks -------------------------------------------------------------------------

@dataclass
class Arrivals:
    """A receiver's record: (fire id, arrival ns) per request that carried a fire id."""
    pairs: list[tuple[str, int]]
    requests: int
    without_fire_id: int
    malformed: int


def read_arrivals(path: Path) -> Arrivals:
    with open(path, "rb") as f:
        counts = dict(item.split(b"=") for item in f.readline()[2:].split())
        pairs = []
        for line in f:
            at, fid = line.rstrip(b"\n").split(b" ", 1)
            pairs.append((fid.decode(), int(at)))
    return Arrivals(pairs, int(counts[b"requests"]), int(counts[b"without_fire_id"]),
                    int(counts[b"malformed"]))


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process, from /proc (as bench.common reads them)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Receiver:
    """A receiver in its own process, for a benchmark: ``start``, point webhooks at ``url`` (or
    at another path of it, ``url_at``), ``stop`` and read what arrived. It answers each request
    ``delay_s`` after it came (0: at once). Its CPU is ``cpu_seconds()`` while it runs; ``stop``
    keeps the last reading, taken just before it is told to stop, in ``final_cpu_s``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, out: Path | None = None,
                 delay_s: float = 0.0) -> None:
        self.host, self.port, self.delay_s = host, port, delay_s
        self.out = out or Path(tempfile.mkdtemp(prefix="cronstream-receiver-")) / "arrivals.txt"
        self.proc: subprocess.Popen[bytes] | None = None
        self.loop = ""
        self.final_cpu_s: float | None = None
        self._pending = b""
        self._arrivals: Arrivals | None = None  # read once it has stopped

    @property
    def url(self) -> str:
        return self.url_at(HOOK)

    def url_at(self, path: str) -> str:
        """The receiver's URL with ``path``: the same host (scheme, address, port) as ``url``."""
        return f"http://{self.host}:{self.port}{path}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def start(self, timeout_s: float = 30.0) -> Receiver:
        repo = Path(__file__).resolve().parents[1]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.receiver", "--host", self.host, "--port", str(self.port),
             "--out", str(self.out), "--delay-s", str(self.delay_s)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=repo)
        ready = self._line(timeout_s).split()
        if ready[:1] != ["ready"]:
            self.stop()
            raise RuntimeError(f"the receiver did not start: {' '.join(ready)!r}")
        self.port, self.loop = int(ready[2]), ready[3].removeprefix("loop=")
        return self

    def _line(self, timeout_s: float) -> str:
        """The receiver's next line on stdout (raw reads: a buffered pipe hides lines from
        select)."""
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(f"the receiver said nothing in {timeout_s} s")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"the receiver ended (exit {self.proc.wait()})")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode()

    def _ask(self, command: str, timeout_s: float = 30.0) -> list[str]:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")
        self.proc.stdin.flush()
        return self._line(timeout_s).split()

    def count(self, path: str | None = None) -> tuple[int, int]:
        """Requests received so far (to ``path`` if given), and the last one's arrival time in
        ns (0 before the first)."""
        answer = self._ask(f"count {path}" if path else "count")
        return int(answer[1]), int(answer[2])

    def dump(self) -> Arrivals:
        self._ask("dump")
        return read_arrivals(self.out)

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.pid)

    def stop(self, timeout_s: float = 60.0) -> Arrivals | None:
        """Stop the receiver (SIGTERM) and read what arrived (None if it wrote nothing); once
        stopped, the same arrivals again."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.final_cpu_s = self.cpu_seconds()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        if self._arrivals is None and self.out.exists():
            self._arrivals = read_arrivals(self.out)
        return self._arrivals

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- the box's HTTP ceiling ---------------------------------------------------------------------

@dataclass(frozen=True)
class Ceiling:
    client: str
    requests: int
    failed: int
    seconds: float
    client_cpu_s: float
    receiver_cpu_s: float

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds

    def line(self) -> str:
        return (f"{self.client}: {self.per_second:,.0f} requests/s, client "
                f"{self.client_cpu_s / self.requests * 1000:.2f} ms CPU/request, receiver "
                f"{self.receiver_cpu_s / self.requests * 1000:.3f} ms CPU/request"
                + (f", {self.failed} FAILED" if self.failed else ""))

    def figures(self) -> dict[str, Any]:
        return {"requests/s": round(self.per_second),
                "client CPU ms/request": round(self.client_cpu_s / self.requests * 1000, 3),
                "receiver CPU ms/request": round(self.receiver_cpu_s / self.requests * 1000, 3),
                "failed": self.failed}


def fired_for(i: int) -> dict[str, Any]:
    """A fired record with what ``call_webhook`` reads of it."""
    return {"fire_id": f"ceiling-{i:07d}@2026-01-01T00:00:00.000Z", "nominal_ms": 1_767_225_600_000,
            "tenant": "ceiling", "target": {"type": "webhook", "url": "", "method": "POST",
                                            "headers": {}, "body": None, "timeout_s": 10.0}}


async def _drive(call: Call, requests: int, concurrency: int) -> int:
    """``requests`` calls of ``call(i)`` (True when it succeeded), ``concurrency`` at a time;
    returns the failures."""
    next_i, failed = 0, 0

    async def lane() -> None:
        nonlocal next_i, failed
        while next_i < requests:
            i, next_i = next_i, next_i + 1
            if not await call(i):
                failed += 1

    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return failed


@asynccontextmanager
async def _executor(url: str) -> AsyncIterator[Call]:
    """The executor's client as it makes it (``streams.execution.webhook_client``), each request
    made by ``call_webhook``: the SSRF check, the headers, the timeout, no redirects."""
    from streams.execution import targets
    from streams.execution.webhook_client import WebhookClient

    client = WebhookClient(CONCURRENCY)
    try:
        async def call(i: int) -> bool:
            fired = fired_for(i)
            fired["target"]["url"] = url
            return (await targets.call_webhook(client, fired, ["127.0.0.1"])).ok

        yield call
    finally:
        client.close()


@asynccontextmanager
async def _aiohttp(url: str) -> AsyncIterator[Call]:
    """aiohttp, the executor's client until issue 39, making the same request (for comparison)."""
    import aiohttp

    from streams.execution import ssrf, targets

    connector = aiohttp.TCPConnector(limit=CONCURRENCY, limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar(),
                                     auto_decompress=False) as session:
        async def call(i: int) -> bool:
            ssrf.check_addresses("127.0.0.1", ["127.0.0.1"], ["127.0.0.1"])
            async with session.post(url, headers=targets.headers_for(fired_for(i)),
                                    timeout=aiohttp.ClientTimeout(total=10.0),
                                    allow_redirects=False) as response:
                await response.read()
                return 200 <= response.status < 300

        yield call


@asynccontextmanager
async def _httpx(url: str) -> AsyncIterator[Call]:
    """httpx, the executor's client until issue 28, making the same request (for comparison)."""
    import httpx

    from streams.adapters import dns
    from streams.execution import ssrf, targets

    resolver = dns.Resolver()
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=CONCURRENCY)) as client:
        async def call(i: int) -> bool:
            await ssrf.vet(url, ["127.0.0.1"], resolver.resolve)
            try:
                response = await client.post(url, headers=targets.headers_for(fired_for(i)),
                                             timeout=10.0, follow_redirects=False)
            except httpx.HTTPError:
                return False
            return 200 <= response.status_code < 300

        yield call


CLIENTS: dict[str, Callable[[str], AbstractAsyncContextManager[Call]]] = {
    "the executor's (webhook_client.WebhookClient + call_webhook)": _executor,
    "aiohttp (the executor's until issue 39, for comparison)": _aiohttp,
    "httpx.AsyncClient (the executor's until issue 28, for comparison)": _httpx,
}


async def _measure(name: str, receiver: Receiver, requests: int, warmup: int) -> Ceiling:
    async with CLIENTS[name](receiver.url) as call:
        await _drive(call, warmup, CONCURRENCY)  # the pool's connections opened first
        mine, theirs = process_cpu_seconds(os.getpid()), receiver.cpu_seconds()
        started = time.monotonic()
        failed = await _drive(call, requests, CONCURRENCY)
        seconds = time.monotonic() - started
        return Ceiling(name, requests, failed, seconds, process_cpu_seconds(os.getpid()) - mine,
                       receiver.cpu_seconds() - theirs)


def ceiling(requests: int = 20_000, warmup: int | None = None) -> list[Ceiling]:
    """Each client of ``CLIENTS`` driving a fresh receiver alone, ``CONCURRENCY`` requests in
    flight, on the default asyncio loop (a worker's): requests/s and the CPU each side used per
    request (this process's and the receiver's, from /proc, over the timed requests only; a
    warm-up of ``warmup`` requests, default twice ``CONCURRENCY``, opens the connections)."""
    warmup = CONCURRENCY * 2 if warmup is None else warmup
    measured = []
    for name in CLIENTS:
        with Receiver() as receiver:
            measured.append(asyncio.run(_measure(name, receiver, requests, warmup)))
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    parser.add_argument("--out", type=Path, default=Path("arrivals.txt"))
    parser.add_argument("--delay-s", type=float, default=0.0,
                        help="answer each request this long after it arrived (a slow target)")
    parser.add_argument("--ceiling", action="store_true",
                        help="measure the box's HTTP ceiling against a receiver, then exit")
    parser.add_argument("--requests", type=int, default=20_000, help="with --ceiling")
    args = parser.parse_args()
    if args.delay_s < 0:
        parser.error(f"--delay-s {args.delay_s} is negative")
    if not args.ceiling:
        run_server(args.host, args.port, args.out, args.delay_s)
        return
    from bench.common import report

    measured = ceiling(args.requests)
    print(f"HTTP ceiling: a receiver on 127.0.0.1 driven alone, {args.requests:,} POSTs per client")
    for result in measured:
        print(f"  {result.line()}", flush=True)
    report("http-ceiling", {result.client: result.figures() for result in measured},
           {"requests": args.requests})


if __name__ == "__main__":
    main()
