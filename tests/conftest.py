"""Shared fixtures. Integration tests run on the real local stack, which ``stack_up`` starts."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from stack.local import Stack
from streams import settings


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    """The local stack with one worker and the API; stopped afterwards if this session started it."""
    s = Stack(settings.load())
    was_running = s.status().get("kafka", "").startswith("running")
    s.up(with_app=True)
    yield s
    if not was_running and not os.environ.get("CRONSTREAM_KEEP_STACK"):
        s.down()
