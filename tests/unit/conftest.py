"""Unit tests touch no network (issue 41): pure logic, in-process fakes and ASGI apps called in
process. A test that connects a socket (to a closed port or to a server it started) or makes a
Kafka client fails, naming what it reached for; what needs one is an integration test, which has
the real stack.

Why both checks: Python's sockets (httpx, asyncio, the standard library) all connect through
``socket.socket.connect``; librdkafka's clients connect from C, where no Python patch reaches, so
making one is what fails. A Kafka client a test left behind used to print librdkafka's
"Connection refused" lines after the unit run, long after the test that made it had passed.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import pytest

KAFKA_CLIENTS = (confluent_kafka.Producer, confluent_kafka.Consumer,
                 confluent_kafka.admin.AdminClient)
OURS = ("streams.", "api.", "cli.", "stack.", "bench.", "ops.", "tests.")


class NetworkInUnitTest(AssertionError):
    """A unit test reached for the network."""


def _refuse_connect(real: Any) -> Any:
    def connect(self: socket.socket, address: Any) -> Any:
        if self.family == socket.AF_UNIX:  # a pipe to a child process, not the network
            return real(self, address)
        raise NetworkInUnitTest(f"a unit test connected a socket to {address!r}: a unit test "
                                "touches no network (tests/unit/conftest.py); make it an "
                                "integration test or give the code a fake")
    return connect


def _refusing(client: type) -> type:
    class Refused(client):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise NetworkInUnitTest(f"a unit test made a Kafka {client.__name__}: a unit test "
                                    "touches no network (tests/unit/conftest.py); pass the code "
                                    "a fake (tests/unit/fakes.py)")
    Refused.__name__ = client.__name__
    return Refused


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(socket.socket, "connect", _refuse_connect(socket.socket.connect))
    monkeypatch.setattr(socket.socket, "connect_ex", _refuse_connect(socket.socket.connect_ex))
    refused = {client: _refusing(client) for client in KAFKA_CLIENTS}
    monkeypatch.setattr(confluent_kafka, "Producer", refused[confluent_kafka.Producer])
    monkeypatch.setattr(confluent_kafka, "Consumer", refused[confluent_kafka.Consumer])
    monkeypatch.setattr(confluent_kafka.admin, "AdminClient",
                        refused[confluent_kafka.admin.AdminClient])
    # the project's modules bound the classes at import (``from confluent_kafka import Consumer``)
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(OURS):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, type) and value in refused:
                monkeypatch.setattr(module, attr, refused[value])
    yield
