"""Find the workers' group coordinator within a session of its move, while a node is down.

Why: when a node stops, the group's coordinator moves to another node, which loads the group and
gives each member one session (2 s, ``settings.group_session``) to heartbeat it there. A member
that finds it later is dropped, and the whole group rebalances and recovers. On three nodes a
rolling restart dropped the worker that way at most moves, and every drop stalled firing and
sending for 10–35 s (issue 42, item 2; docs/testing.md). The worker's log of one move: the
new coordinator had loaded the group at 14:54:26.38; the worker's lookups failed at 26.28 and
27.36, and it found the new coordinator at 30.39, two seconds after the group had dropped it.

aiokafka (0.14) asks one node picked at random (``AIOKafkaClient.coordinator_lookup``). The node
may be the one that just went away; the lookup then fails and aiokafka waits for a metadata
refresh, itself sent to a random node (aio-libs/aiokafka#187), and backs off before asking a
random node again. Both requests go over a node's default connection, which also carries the
fetcher's long polls (faust waits up to 1.5 s, robinhood/faust#281). A broker answers one
request of a connection at a time, so each one waited behind a poll.

``install`` replaces the lookup with ``find_coordinator``:

- every known node is asked in turn, those with an open connection first;
- over a connection of its own (``LOOKUP``), never behind a poll;
- each ask is bounded by ``ATTEMPT_S`` (and the deadline); a node that does not answer in time
  is skipped, its connection, if still being made, left to finish for the next ask;
- "not available" (no live leader yet for the group's offsets partition) is asked again after
  a short backoff, up to ``DEADLINE_S``;
- after that deadline it raises as aiokafka's lookup did, and aiokafka's own retry loop goes on.

Answers are taken as they are: FindCoordinator only names a node. aiokafka checks that it can
reach that node before it uses it, and the group's heartbeats prove it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from typing import Any

from streams.runtime import library_patch

log = logging.getLogger(__name__)

LOOKUP = "coordinator-lookup"  # a connection key beside aiokafka's DEFAULT and COORDINATION
ATTEMPT_S = 1.0  # one node's answer; a live node answers FindCoordinator in milliseconds
DEADLINE_S = 2.0  # the whole lookup, before aiokafka's own retry (a metadata refresh) takes over
BACKOFF_S = 0.05  # between rounds while every node said "not available yet"
MIN_REQUEST_S = 0.1  # the least of an ask's time worth a request once its connect is made


class Unreachable(Exception):
    """A node could not be asked: connection refused or closed, or no answer in time."""


def ask_order(nodes: Iterable[int], connected: Collection[int],
              shuffle: Callable[[list[int]], None] = random.shuffle) -> list[int]:
    """The nodes to ask, in order: those with an open connection first (they answer now; a node
    with none may be the one that went away), each group shuffled so lookups spread."""
    up = [n for n in nodes if n in connected]
    rest = [n for n in nodes if n not in connected]
    shuffle(up)
    shuffle(rest)
    return up + rest


async def find_coordinator(ask: Callable[[int, float], Awaitable[int]],
                           nodes: Callable[[], Sequence[int]], *,
                           deadline_s: float = DEADLINE_S, backoff_s: float = BACKOFF_S,
                           attempt_s: float = ATTEMPT_S,
                           retriable: Callable[[Exception], bool],
                           monotonic: Callable[[], float] = time.monotonic,
                           sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep) -> int:
    """The coordinator's node id, from the first node of ``nodes()`` (in ``ask_order``) that
    answers with one; ``ask(node, timeout_s)`` gets at most ``attempt_s`` and never past the
    deadline. A node that raises ``Unreachable`` is passed over; an answer that is a retriable
    error (no live leader yet for the group's offsets partition) ends the round, asked again
    after ``backoff_s``; any other error is raised at once. At ``deadline_s`` the last error is
    raised: the caller's retry goes on from there."""
    stop_at = monotonic() + deadline_s
    last: Exception = Unreachable("no node known")
    while True:
        for node in nodes():
            left = stop_at - monotonic()
            if left <= 0:
                raise last
            try:
                return await ask(node, min(attempt_s, left))
            except Unreachable as exc:
                last = exc
            except Exception as exc:
                if not retriable(exc):
                    raise
                last = exc
                break
        if monotonic() + backoff_s >= stop_at:
            raise last
        await sleep(backoff_s)


def install() -> None:
    """Make every aiokafka client of this process find coordinators with ``find_coordinator``
    (idempotent)."""
    from aiokafka import errors
    from aiokafka.client import AIOKafkaClient
    from aiokafka.protocol.coordination import FindCoordinatorRequest

    async def coordinator_lookup(self: Any, coordinator_type: Any, coordinator_key: str) -> int:
        connects: dict[int, asyncio.Future[bool]] = self.__dict__.setdefault(
            "_cronstream_lookup_connects", {})

        async def ask(node: int, timeout_s: float) -> int:
            # The connection is made apart from the request and outlives an ask that gave up on
            # it: a TLS or SASL handshake slower than an ask (an OIDC token fetched for each new
            # connection) is finished for the next ask instead of begun again each time.
            # The connect and the request share the ask's timeout (each given all of it, an ask
            # took up to twice that and a lookup ran past its deadline); a request whose time the
            # connect took keeps the new connection, a request that had it all renews it.
            loop = asyncio.get_running_loop()
            until = loop.time() + timeout_s
            conn = self._conns.get((node, LOOKUP))  # noqa: SLF001
            was_connected = conn is not None and conn.connected()
            connecting = connects.get(node)
            if connecting is None or connecting.done():
                connecting = connects[node] = asyncio.ensure_future(
                    self.ready(node, group=LOOKUP))
            try:
                if not await asyncio.wait_for(asyncio.shield(connecting), timeout_s):
                    raise Unreachable(f"node {node}: no connection")
            except TimeoutError as exc:
                raise Unreachable(f"node {node}: still connecting") from exc
            left = until - loop.time()
            if left < MIN_REQUEST_S:
                raise Unreachable(f"node {node}: connected, no time left to ask")
            try:
                response = await asyncio.wait_for(
                    self.send(node, FindCoordinatorRequest(coordinator_key, coordinator_type),
                              group=LOOKUP), left)
            except (TimeoutError, errors.KafkaConnectionError, errors.NodeNotReadyError,
                    errors.RequestTimedOutError) as exc:
                conn = self._conns.get((node, LOOKUP))  # noqa: SLF001 - renewed at the next ask
                if conn is not None and (was_connected or not isinstance(exc, TimeoutError)):
                    conn.close()
                raise Unreachable(f"node {node}: {exc!r}") from exc
            error = errors.for_code(response.error_code)
            if error is not errors.NoError:
                raise error()
            return int(response.coordinator_id)

        def nodes() -> list[int]:
            connected = {node for (node, _), conn in self._conns.items()  # noqa: SLF001
                         if node != "bootstrap" and conn.connected()}
            return ask_order([b.nodeId for b in self.cluster.brokers()], connected)

        try:
            return await find_coordinator(
                ask, nodes, retriable=lambda exc: getattr(exc, "retriable", False))
        except Unreachable as exc:
            log.warning("coordinator of %s not found: no node answered (%s)", coordinator_key,
                        exc)
            raise errors.NodeNotReadyError(str(exc)) from exc

    library_patch.replace(AIOKafkaClient, "coordinator_lookup", coordinator_lookup)
