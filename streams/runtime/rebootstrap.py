"""Let an aiokafka client that lost every broker it knew ask the configured servers again.

Why: aiokafka (0.14) keeps the broker list of its last metadata answer and refreshes only from
those brokers (aio-libs/aiokafka#703). A metadata answer lists only the brokers that are
unfenced at that moment. On three nodes, one taken just after another node's outage, the
worker's changelog producer was left knowing node 2 alone. When node 2 was then SIGKILLed, the
producer could reach no broker for 44 s, and nothing was sent ("Unable to update metadata from
[2]", 408 times), until node 2 came back. Nodes 1 and 3 were up all that time (issue 42, item 2).
The Java client has a setting for this case, ``metadata.recovery.strategy=rebootstrap``
(KIP-899).

``install`` wraps the client's metadata refresh. When it failed (no known broker answered, or
one answered with no brokers), the client connects to its ``bootstrap_servers`` in a random
order, each within ``CONNECT_S``. The first that accepts is handed to aiokafka as
its "bootstrap" connection, which its own refresh then asks (the same path as a first start).
On success, the client closes that connection again.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

from streams.runtime import library_patch

log = logging.getLogger(__name__)

CONNECT_S = 5.0  # one server's connection: a host that vanished does not answer at all

# the client attributes its bootstrap() passes to create_conn (aiokafka 0.14): a unit test pins
# them against that source, so an aiokafka that renames one fails there, not in an outage
CONN_SETTINGS = {
    "client_id": "_client_id", "request_timeout_ms": "_request_timeout_ms",
    "ssl_context": "_ssl_context", "security_protocol": "_security_protocol",
    "max_idle_ms": "_connections_max_idle_ms", "sasl_mechanism": "_sasl_mechanism",
    "sasl_plain_username": "_sasl_plain_username",
    "sasl_plain_password": "_sasl_plain_password",
    "sasl_kerberos_service_name": "_sasl_kerberos_service_name",
    "sasl_kerberos_domain_name": "_sasl_kerberos_domain_name",
    "sasl_oauth_token_provider": "_sasl_oauth_token_provider",
}


async def _connect_bootstrap(client: Any) -> bool:
    """Open a connection to the first configured server that accepts one and give it to
    ``client`` as its bootstrap connection; False if none did."""
    from aiokafka.client import ConnectionGroup
    from aiokafka.conn import create_conn

    settings = {name: getattr(client, attr) for name, attr in CONN_SETTINGS.items()}
    hosts = list(client.hosts)
    random.shuffle(hosts)  # a server that accepts but does not answer is not the only one tried
    for host, port, _ in hosts:
        try:
            conn = await asyncio.wait_for(create_conn(host, port, **settings), CONNECT_S)
        except Exception as exc:  # noqa: BLE001 - the next server may answer
            log.debug("rebootstrap: %s:%s refused (%s)", host, port, exc)
            continue
        stale = client._conns.pop(("bootstrap", ConnectionGroup.DEFAULT), None)  # noqa: SLF001
        if stale is not None:
            stale.close()
        client._conns[("bootstrap", ConnectionGroup.DEFAULT)] = conn  # noqa: SLF001
        return True
    return False


def install() -> None:
    """Make every aiokafka client of this process rebootstrap when no known broker answers a
    metadata refresh (idempotent)."""
    from aiokafka.client import AIOKafkaClient

    original = library_patch.original(AIOKafkaClient, "_metadata_update")

    async def _metadata_update(self: Any, cluster_metadata: Any, topics: Any) -> bool:
        if await original(self, cluster_metadata, topics):
            return True
        known = sorted(str(b.nodeId) for b in self.cluster.brokers())
        if not await _connect_bootstrap(self):
            return False
        updated: bool = await original(self, cluster_metadata, topics)
        if updated:
            log.warning("%s reached none of the brokers it knew (%s); asked the bootstrap "
                        "servers and now knows %s", self, ", ".join(known),
                        sorted(b.nodeId for b in self.cluster.brokers()))
        return updated

    library_patch.replace(AIOKafkaClient, "_metadata_update", _metadata_update)
