"""``streams.runtime.coordinator_lookup``: which nodes are asked, in what order, and when the
lookup gives up, without a broker (the real one: ``tests/integration/test_coordinator_lookup.py``)."""

from __future__ import annotations

import asyncio
import inspect

import pytest
from aiokafka import errors
from aiokafka.client import AIOKafkaClient

from streams.runtime import coordinator_lookup, library_patch
from streams.runtime.coordinator_lookup import Unreachable, ask_order, find_coordinator


class Clock:
    """A monotonic clock moved only by the lookup's own sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def retriable(exc: Exception) -> bool:
    return getattr(exc, "retriable", False)


def lookup(answers: dict[int, list[object]], order: list[int], clock: Clock,
           asked: list[int], **kw: float) -> int:
    """find_coordinator over fake nodes: each ask pops the node's next answer (an int is a
    coordinator id, an exception is raised)."""
    async def ask(node: int, timeout_s: float) -> int:
        assert 0 < timeout_s <= coordinator_lookup.ATTEMPT_S
        asked.append(node)
        answer = answers[node].pop(0) if len(answers[node]) > 1 else answers[node][0]
        if isinstance(answer, Exception):
            raise answer
        return int(answer)  # type: ignore[call-overload]

    return asyncio.run(find_coordinator(ask, lambda: order, retriable=retriable,
                                        monotonic=clock.monotonic, sleep=clock.sleep, **kw))


def test_nodes_with_an_open_connection_are_asked_first() -> None:
    assert ask_order([1, 2, 3], connected={3, 1}, shuffle=lambda nodes: None) == [1, 3, 2]
    assert sorted(ask_order([1, 2, 3], connected=set())) == [1, 2, 3]


def test_a_node_that_cannot_be_reached_is_passed_over_at_once() -> None:
    clock, asked = Clock(), []
    found = lookup({3: [Unreachable("node 3: refused")], 1: [2]}, [3, 1], clock, asked)
    assert (found, asked, clock.sleeps) == (2, [3, 1], [])


def test_a_group_still_loading_is_asked_again_after_a_short_backoff() -> None:
    clock, asked = Clock(), []
    loading = errors.CoordinatorNotAvailableError()
    found = lookup({1: [loading, loading, 1], 2: [7]}, [1, 2], clock, asked, backoff_s=0.05)
    # a retriable answer ends the round: node 2 is not asked behind node 1's "not yet"
    assert (found, asked) == (1, [1, 1, 1])
    assert clock.sleeps == [0.05, 0.05]


def test_after_the_deadline_the_last_error_is_raised_for_the_callers_retry() -> None:
    clock, asked = Clock(), []
    with pytest.raises(errors.CoordinatorNotAvailableError):
        lookup({1: [errors.CoordinatorNotAvailableError()]}, [1], clock, asked,
               deadline_s=1.0, backoff_s=0.25)
    assert clock.now < 1.0 and len(asked) == 4


def test_no_ask_outlasts_the_deadline_even_within_a_round() -> None:
    """Every node of a round unreachable: each ask gets what is left of the deadline, and the
    round stops there, not a whole round of asks later (a member has one session, 2 s)."""
    clock, given = Clock(), []

    async def slow(node: int, timeout_s: float) -> int:
        given.append(timeout_s)
        clock.now += timeout_s  # each ask waits out its timeout
        raise Unreachable(f"node {node}: no answer")

    with pytest.raises(Unreachable):
        asyncio.run(find_coordinator(slow, lambda: [1, 2, 3, 4], deadline_s=2.5, attempt_s=1.0,
                                     retriable=retriable, monotonic=clock.monotonic,
                                     sleep=clock.sleep))
    assert given == [1.0, 1.0, 0.5] and clock.now == 2.5
    with pytest.raises(Unreachable):
        lookup({1: [Unreachable("gone")], 2: [Unreachable("gone")]}, [1, 2], Clock(), [],
               deadline_s=0.1, backoff_s=0.05)


def test_an_error_that_is_not_retriable_is_raised_at_once() -> None:
    clock, asked = Clock(), []
    with pytest.raises(errors.GroupAuthorizationFailedError):
        lookup({1: [errors.GroupAuthorizationFailedError()], 2: [2]}, [1, 2], clock, asked)
    assert asked == [1]


def test_install_replaces_aiokafkas_lookup_once_and_reads_only_names_it_has(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The names the installed lookup reads of aiokafka's client (0.14): a rename fails here."""
    monkeypatch.setattr(AIOKafkaClient, "coordinator_lookup", AIOKafkaClient.coordinator_lookup)
    # aiokafka's own, though another test may have built a worker (which installs it) first
    original = library_patch.original(AIOKafkaClient, "coordinator_lookup")
    coordinator_lookup.install()
    coordinator_lookup.install()  # idempotent
    assert AIOKafkaClient.coordinator_lookup.unwrapped is original  # type: ignore[attr-defined]
    assert list(inspect.signature(original).parameters) == ["self", "coordinator_type",
                                                            "coordinator_key"]
    assert "group" in inspect.signature(AIOKafkaClient.send).parameters

    async def fresh() -> AIOKafkaClient:
        return AIOKafkaClient(bootstrap_servers="127.0.0.1:9")

    client = asyncio.run(fresh())
    assert client._conns == {} and client.cluster.brokers() == set()  # noqa: SLF001



class SlowNode:
    """A stand-in for aiokafka's client (the names the installed lookup reads) with one node
    that takes ``connect_s`` to connect and ``answers_s`` (one per request) to answer."""

    class Broker:
        nodeId = 1  # noqa: N815 - aiokafka's name

    class Cluster:
        def brokers(self) -> set[object]:
            return {SlowNode.Broker()}

    class Conn:
        def __init__(self, node: SlowNode) -> None:
            self.node, self.open = node, True

        def connected(self) -> bool:
            return self.open

        def close(self) -> None:
            self.open = False
            self.node.closed += 1

    def __init__(self, connect_s: float, answers_s: list[float], connected: bool = False) -> None:
        self.connect_s, self.answers_s = connect_s, answers_s
        self._conns: dict[tuple[int, str], SlowNode.Conn] = {}
        if connected:
            self._conns[(1, coordinator_lookup.LOOKUP)] = self.Conn(self)
        self.cluster = self.Cluster()
        self.sends: list[str] = []  # how each request ended: "answered" or "cancelled"
        self.closed = 0  # lookup connections closed

    async def ready(self, node: int, group: str) -> bool:
        conn = self._conns.get((node, group))
        if conn is None or not conn.connected():
            await asyncio.sleep(self.connect_s)
            self._conns[(node, group)] = self.Conn(self)
        return True

    async def send(self, node: int, request: object, group: str) -> object:
        try:
            await asyncio.sleep(self.answers_s.pop(0))
        except asyncio.CancelledError:
            self.sends.append("cancelled")
            raise
        self.sends.append("answered")
        return type("Response", (), {"error_code": 0, "coordinator_id": 1})()


def installed_lookup(monkeypatch: pytest.MonkeyPatch, node: SlowNode) -> int:
    monkeypatch.setattr(AIOKafkaClient, "coordinator_lookup", AIOKafkaClient.coordinator_lookup)
    coordinator_lookup.install()
    return asyncio.run(AIOKafkaClient.coordinator_lookup(node, 0, "cronstream"))  # type: ignore[arg-type]


def test_an_asks_connect_and_request_share_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A connect of 0.6 s leaves the request 0.4 s of the ask's 1 s, not 1 s of its own: given
    each all of it, one ask took up to 2 s and a lookup ran past its deadline. The connection
    the ask made is kept, and the next round's ask answers over it."""
    node = SlowNode(connect_s=0.6, answers_s=[0.8, 0.1])
    assert installed_lookup(monkeypatch, node) == 1
    assert node.sends == ["cancelled", "answered"]
    assert node.closed == 0


def test_a_request_that_had_the_whole_ask_and_no_answer_renews_the_connection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    node = SlowNode(connect_s=0.0, answers_s=[1.5, 0.1], connected=True)
    assert installed_lookup(monkeypatch, node) == 1
    assert node.sends == ["cancelled", "answered"]
    assert node.closed == 1
