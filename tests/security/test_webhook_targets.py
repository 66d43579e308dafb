"""What a tenant's webhook may reach, and what its answer may cost (issue 40): addresses that are
not globally routable are refused without an allow-list entry (carrier-grade NAT passed the old
blocklist), and a tenant's server streaming an endless answer is read no further than the cap
(each of a worker's 256 calls in flight read it whole). Judged from the receiving server's own
count of what it managed to send."""

from __future__ import annotations

import socket
import threading

from tests.conftest import make_client
from tests.waiting import wait_for


def test_addresses_that_are_not_globally_routable_are_refused_at_creation(stack):
    with make_client(stack, allowed_targets=[]) as strict:
        for url in ("http://100.64.0.1/x", "http://100.127.255.254:8080/x",
                    "http://198.18.0.1/x", "http://[64:ff9b::a9fe:a9fe]/x",
                    "http://[::ffff:10.0.0.1]/x", "http://192.0.0.170/x"):
            response = strict.post("/v1/jobs", json={"schedule": {"cron": "0 0 1 1 *"},
                                                     "target": {"type": "webhook", "url": url}})
            assert response.status_code == 422, (url, response.text)
            assert response.json()["detail"][0]["loc"] == ["body", "target", "url"], url


class Endless:
    """An HTTP server on loopback answering 200 with a body that never ends (until ``cap``
    bytes): counts what it could write before the client closed the connection."""

    def __init__(self, cap: int = 256 << 20) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.cap, self.written, self.done = cap, 0, threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            piece = b"x" * (1 << 20)
            try:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
                while self.written < self.cap:
                    conn.sendall(b"100000\r\n" + piece + b"\r\n")
                    self.written += len(piece)
            except OSError:
                pass  # the client closed the connection: what it did not want
        self.done.set()


def test_an_answer_that_never_ends_is_read_no_further_than_the_cap(stack, api):
    server = Endless()
    job = api.post("/v1/jobs", json={"schedule": {"cron": "0 0 1 1 *"}, "target": {
        "type": "webhook", "url": f"http://127.0.0.1:{server.port}/hook", "timeout_s": 30}})
    assert job.status_code == 201, job.text
    assert api.post(f"/v1/jobs/{job.json()['id']}/trigger").status_code == 202
    wait_for(server.done.is_set, timeout_s=120)
    # the cap (64 KiB) plus what the two sockets' buffers hold: a few MiB at most
    assert server.written < 32 << 20, f"the worker read {server.written >> 20} MiB of the answer"
