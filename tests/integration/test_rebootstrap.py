"""An aiokafka client that knows only a broker that is gone finds the cluster again through its
bootstrap servers (``streams.runtime.rebootstrap``), on a real broker.

On three nodes the worker's changelog producer was left knowing one node; when that node was
SIGKILLed it reached no broker for 44 s while two were up, and nothing was sent (issue 42,
item 2). Here a client's view is narrowed to a broker that refuses connections, as a metadata
answer given while the others were fenced would leave it; its next refresh must find the real
broker. Without the rebootstrap the refresh fails and the client stays blind.
"""

from __future__ import annotations

import asyncio
import socket

from aiokafka.client import AIOKafkaClient
from aiokafka.structs import BrokerMetadata

from streams.runtime import rebootstrap


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # nothing listens once the socket is closed


def test_a_client_that_knows_only_a_dead_broker_finds_the_cluster_again(stack, monkeypatch):
    monkeypatch.setattr(AIOKafkaClient, "_metadata_update", AIOKafkaClient._metadata_update)
    rebootstrap.install()  # the worker's (streams.runtime.app.build); restored after

    async def scenario() -> tuple[bool, set, set]:
        client = AIOKafkaClient(bootstrap_servers=stack.s.bootstrap)
        await client.bootstrap()
        try:
            real = {b.nodeId for b in client.cluster.brokers()}
            for conn in list(client._conns.values()):  # noqa: SLF001
                conn.close()
            gone = BrokerMetadata(99, "127.0.0.1", closed_port(), None)
            client.cluster._brokers = {99: gone}  # noqa: SLF001 - the narrowed view
            updated = await asyncio.wait_for(client.force_metadata_update(), 30)
            return updated, real, {b.nodeId for b in client.cluster.brokers()}
        finally:
            await client.close()

    updated, real, known = asyncio.run(scenario())
    assert updated, "the refresh failed: the client knows only a broker that is gone"
    assert known == real, (known, real)
