"""The unit suite's guard (tests/unit/conftest.py) refuses the network, so a unit test that
reaches for it fails where it does, not as librdkafka's lines after the run."""

from __future__ import annotations

import socket

import confluent_kafka
import pytest

from streams.campaigns import walker
from tests.unit.conftest import NetworkInUnitTest


def test_a_socket_connect_fails_the_test() -> None:
    with socket.socket() as sock, pytest.raises(NetworkInUnitTest, match="127.0.0.1"):
        sock.connect(("127.0.0.1", 9))


def test_a_kafka_client_fails_the_test_however_it_was_imported() -> None:
    with pytest.raises(NetworkInUnitTest, match="Producer"):
        confluent_kafka.Producer({"bootstrap.servers": "127.0.0.1:9"})
    with pytest.raises(NetworkInUnitTest, match="Consumer"):
        walker.Consumer({"bootstrap.servers": "127.0.0.1:9", "group.id": "g"})


def test_a_pipe_to_a_child_is_not_the_network() -> None:
    left, right = socket.socketpair(socket.AF_UNIX)
    with left, right:
        left.sendall(b"x")
        assert right.recv(1) == b"x"
