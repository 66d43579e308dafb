"""The benchmarks' webhook receiver: its HTTP parsing on raw bytes (served over loopback:
tests/integration/test_bench_receiver.py)."""

from __future__ import annotations

import pytest

from bench.receiver import (
    BAD_REQUEST,
    NO_CONTENT,
    BadRequest,
    Log,
    Receiver,
    ReceiverProtocol,
    Request,
    RequestParser,
    read_arrivals,
)


def post(fire_id: str | None, body: bytes = b"", extra: str = "", path: str = "/hook") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:1\r\n"
    if fire_id is not None:
        head += f"X-Cronstream-Fire-Id: {fire_id}\r\n"
    head += f"Content-Length: {len(body)}\r\n{extra}\r\n"
    return head.encode() + body


def test_a_request_split_across_reads_completes_on_its_last_byte():
    raw = post("job-1@2026-01-01T00:00:00.000Z", b'{"hello": "world"}')
    parser = RequestParser()
    for i in range(len(raw) - 1):  # one byte a read: nothing is complete until the last
        assert parser.feed(raw[i:i + 1]) == []
    assert parser.feed(raw[-1:]) == [Request(b"job-1@2026-01-01T00:00:00.000Z", False, b"/hook")]


@pytest.mark.parametrize("split", [5, 40, 70, 90])
def test_pipelined_requests_come_out_in_order_however_the_reads_fall(split):
    raw = post("a@1", b"xyz") + post("b@2") + post("c@3", b"0123456789")
    parser = RequestParser()
    got = parser.feed(raw[:split]) + parser.feed(raw[split:])
    assert [request.fire_id for request in got] == [b"a@1", b"b@2", b"c@3"]


def test_a_body_that_looks_like_a_request_is_skipped_as_a_body():
    body = post("inside@0")  # the bytes of a request, sent as the body of another
    got = RequestParser().feed(post("outer@1", body) + post("next@2"))
    assert [request.fire_id for request in got] == [b"outer@1", b"next@2"]


def test_a_request_without_the_fire_id_header_is_a_request_without_a_fire_id():
    assert RequestParser().feed(post(None)) == [Request(None, False, b"/hook")]


def test_header_names_are_case_insensitive_and_values_trimmed():
    raw = b"POST / HTTP/1.1\r\nx-cronstream-fire-id:   j@1  \r\ncontent-length: 0\r\n\r\n"
    assert RequestParser().feed(raw) == [Request(b"j@1", False, b"/")]


def test_connection_close_and_http_1_0_close_after_the_answer():
    assert RequestParser().feed(post("a@1", extra="Connection: close\r\n"))[0].close
    raw = b"GET / HTTP/1.0\r\n\r\n"
    assert RequestParser().feed(raw) == [Request(None, True, b"/")]
    raw = b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
    assert RequestParser().feed(raw) == [Request(None, False, b"/")]


@pytest.mark.parametrize("raw", [
    b"NONSENSE\r\n\r\n",
    b"POST / HTTP/1.1\r\nno colon here\r\n\r\n",
    b"POST / HTTP/1.1\r\nContent-Length: many\r\n\r\n",
    b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
])
def test_what_it_cannot_read_is_refused(raw):
    with pytest.raises(BadRequest):
        RequestParser().feed(raw)


class FakeTransport:
    def __init__(self):
        self.written, self.closed = b"", False

    def write(self, data):
        assert not self.closed, "written after it was closed"
        self.written += data

    def close(self):
        self.closed = True

    def is_closing(self):
        return self.closed


def connected(log: Log, delay_s: float = 0.0, call_later=None
              ) -> tuple[ReceiverProtocol, FakeTransport]:
    protocol, transport = ReceiverProtocol(log, delay_s, call_later), FakeTransport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    return protocol, transport


class Timers:
    """A fake ``loop.call_later``: the timers are run when the test says, in the order it says."""

    def __init__(self):
        self.due: list[tuple[float, object]] = []

    def __call__(self, delay_s, callback):
        self.due.append((delay_s, callback))

    def run(self, index: int) -> None:
        self.due.pop(index)[1]()


def test_every_request_is_answered_204_and_recorded_with_one_arrival_time_per_read():
    log = Log()
    protocol, transport = connected(log)
    protocol.data_received(post("a@1") + post(None) + post("b@2")[:10])
    assert transport.written == NO_CONTENT * 2
    protocol.data_received(post("b@2")[10:])
    assert transport.written == NO_CONTENT * 3 and not transport.closed
    assert log.fire_ids == [b"a@1", b"b@2"]
    assert log.requests == 3 and log.without_fire_id == 1
    assert log.arrived_ns[0] <= log.arrived_ns[1]


def test_requests_are_counted_per_path():
    log = Log()
    protocol, _ = connected(log)
    protocol.data_received(post("a@1") + post("v@1", path="/victim") + post("b@2"))
    protocol.data_received(post(None, path="/victim"))
    assert log.count(b"/hook") == (2, log.by_path[b"/hook"][1])
    assert log.count(b"/victim")[0] == 2
    assert log.count(b"/nowhere") == (0, 0)
    assert log.count() == (4, log.arrived_ns[-1])  # all of them; the last arrival with a fire id


def test_delayed_answers_wait_for_their_timer_and_keep_the_request_order():
    log, timers = Log(), Timers()
    protocol, transport = connected(log, 5.0, timers)
    protocol.data_received(post("a@1") + post("b@2"))
    protocol.data_received(post("c@3", extra="Connection: close\r\n"))
    assert transport.written == b"" and log.fire_ids == [b"a@1", b"b@2", b"c@3"]  # recorded now
    assert [delay for delay, _ in timers.due] == [5.0, 5.0]
    timers.run(1)  # the later read's timer first (two timers due at once, run out of order)
    assert transport.written == NO_CONTENT * 2 and not transport.closed  # still the first read's
    timers.run(0)
    assert transport.written == NO_CONTENT * 3 and transport.closed  # closed after its answer


def test_nothing_is_read_after_a_request_that_asked_to_close():
    log, timers = Log(), Timers()
    protocol, transport = connected(log, 1.0, timers)
    protocol.data_received(post("a@1", extra="Connection: close\r\n"))
    protocol.data_received(post("b@2"))
    assert log.fire_ids == [b"a@1"] and len(timers.due) == 1
    timers.run(0)
    assert transport.written == NO_CONTENT and transport.closed


def test_a_malformed_request_after_delayed_ones_is_refused_after_their_answers():
    log, timers = Log(), Timers()
    protocol, transport = connected(log, 1.0, timers)
    protocol.data_received(post("a@1"))
    protocol.data_received(b"NONSENSE\r\n\r\n")
    protocol.data_received(post("b@2"))  # after the refusal: not read
    assert transport.written == b"" and log.malformed == 1 and log.fire_ids == [b"a@1"]
    timers.run(1)
    timers.run(0)
    assert transport.written == NO_CONTENT + BAD_REQUEST and transport.closed


def test_an_answer_owed_to_a_client_that_went_away_is_dropped():
    log, timers = Log(), Timers()
    protocol, transport = connected(log, 1.0, timers)
    protocol.data_received(post("a@1"))
    transport.close()
    timers.run(0)
    assert transport.written == b""


def test_pipelined_requests_after_a_close_are_not_answered():
    log = Log()
    protocol, transport = connected(log)
    protocol.data_received(post("a@1", extra="Connection: close\r\n") + post("b@2"))
    assert transport.written == NO_CONTENT and transport.closed
    assert log.fire_ids == [b"a@1"]


def test_a_malformed_request_gets_400_and_the_connection_closed():
    log = Log()
    protocol, transport = connected(log)
    protocol.data_received(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert transport.written == BAD_REQUEST and transport.closed
    assert log.malformed == 1 and log.requests == 0


def test_the_log_file_reads_back(tmp_path):
    log = Log([b"a@1", b"a@1", b"b@2"], [10, 11, 12], requests=4, without_fire_id=1)
    log.write(tmp_path / "arrivals.txt")
    arrivals = read_arrivals(tmp_path / "arrivals.txt")
    assert arrivals.pairs == [("a@1", 10), ("a@1", 11), ("b@2", 12)]
    assert (arrivals.requests, arrivals.without_fire_id, arrivals.malformed) == (4, 1, 0)


def test_a_receiver_whose_starter_went_away_writes_its_file_and_ends(tmp_path):
    receiver = Receiver(out=tmp_path / "arrivals.txt").start()
    assert receiver.proc is not None and receiver.proc.stdin is not None
    receiver.proc.stdin.close()  # what a benchmark that died leaves it with
    assert receiver.proc.wait(timeout=30) == 0
    assert read_arrivals(tmp_path / "arrivals.txt").requests == 0
    receiver.stop()
