"""A group's coordinator found beside a consumer's long fetch poll, on a real broker
(``streams.runtime.coordinator_lookup``).

A broker answers one request of a connection at a time. aiokafka asked for the coordinator over
the connection its fetcher long-polls on, so a lookup after a coordinator moved waited behind
an idle poll, and the member was dropped by the new coordinator before it found it (three
nodes, rolling restart: issue 42, item 2). Here a consumer's fetch waits on an idle partition
for far longer than the lookup may take; the lookup must answer while that fetch is still
waiting. Without the lookup's own connection it waits behind the poll and is not answered in
time.
"""

from __future__ import annotations

import asyncio
import uuid

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.client import AIOKafkaClient, ConnectionGroup, CoordinationType
from aiokafka.errors import KafkaError
from confluent_kafka.admin import NewTopic

from streams.runtime import coordinator_lookup
from streams.runtime.admin import client as admin_client

POLL_MS = 30_000  # the idle fetch's wait: the lookup must not be queued behind it
LOOKUP_LIMIT_S = 10.0  # far above a lookup's milliseconds, far below the poll


def polling(conn: object) -> bool:
    """Whether ``conn`` has a fetch waiting for its answer (aiokafka's pending requests)."""
    return any(type(request).__name__.startswith("FetchRequest_v")
               for _, request, _ in conn._requests)  # type: ignore[attr-defined]  # noqa: SLF001


def test_the_coordinator_is_found_while_a_fetch_long_polls_the_same_node(stack, monkeypatch):
    bootstrap = stack.s.bootstrap
    topic = f"cronstream-test-lookup-{uuid.uuid4().hex[:8]}"
    admin_client(bootstrap).create_topics([NewTopic(topic, 1, 1)])[topic].result()
    monkeypatch.setattr(AIOKafkaClient, "coordinator_lookup", AIOKafkaClient.coordinator_lookup)
    coordinator_lookup.install()  # the worker's (streams.runtime.app.build); restored after

    async def scenario() -> tuple[int, set[int], int]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=POLL_MS,
                                    request_timeout_ms=POLL_MS + 30_000,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, 0)])
            client = consumer._client  # noqa: SLF001
            waiting = asyncio.ensure_future(consumer.getone())  # the fetcher long-polls
            fetches = None
            while fetches is None:  # until its fetch is on the wire, waiting on the broker
                await asyncio.sleep(0.01)
                fetches = next((conn for (node, group), conn in client._conns.items()  # noqa: SLF001
                                if group == ConnectionGroup.DEFAULT and polling(conn)), None)
            try:
                found = await asyncio.wait_for(
                    client.coordinator_lookup(CoordinationType.GROUP, f"lookup-{topic}"),
                    LOOKUP_LIMIT_S)
            except (TimeoutError, KafkaError) as exc:
                raise AssertionError(
                    f"the coordinator lookup failed ({exc!r}) within {LOOKUP_LIMIT_S:g} s: "
                    f"queued behind the fetcher's {POLL_MS / 1000:g} s poll on one connection"
                ) from None
            still_polling = polling(fetches)
            # asked over a connection of its own, whichever node it asked (on three nodes the
            # node that answered may not be the one polled)
            assert any(group == coordinator_lookup.LOOKUP for _, group in client._conns), (  # noqa: SLF001
                list(client._conns))  # noqa: SLF001
            waiting.cancel()
            return found, {b.nodeId for b in client.cluster.brokers()}, still_polling
        finally:
            await consumer.stop()

    found, nodes, still_polling = asyncio.run(scenario())
    assert found in nodes, (found, nodes)
    assert still_polling, "the fetch had ended before the lookup: the scenario proved nothing"
