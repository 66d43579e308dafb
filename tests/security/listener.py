"""A webhook receiver on one loopback address, logging what reached it: the security tests'
independent record of where a call went (an allowed receiver, or the "internal service" a
rebinding name points at next)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from streams.execution.targets import FIRE_ID_HEADER


@dataclass(frozen=True)
class Arrival:
    at: float  # time.monotonic() in the test process, to order it against the test's other logs
    method: str
    path: str
    host: str
    fire_id: str


class Listener:
    def __init__(self, address: str, port: int = 0) -> None:
        self.arrivals: list[Arrival] = []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                listener.arrivals.append(Arrival(time.monotonic(), self.command, self.path,
                                                 self.headers.get("Host", ""),
                                                 self.headers.get(FIRE_ID_HEADER, "")))
                self.send_response(204)
                self.end_headers()

            do_GET = do_POST = do_PUT = _any  # noqa: N815 - http.server's naming

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer((address, port), Handler)
        self.address, self.port = address, self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Listener:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
