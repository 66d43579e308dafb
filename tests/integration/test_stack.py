"""``cronstream stack``: idempotent up, clear errors, and a down that stops exactly our processes."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from stack import processes
from stack.local import Stack, StackError


def test_up_twice_is_harmless(stack):
    before = {name: processes.alive(stack.pidfile(name)) for name in ("kafka", "connect", "api")}
    started = time.monotonic()
    stack.up(with_app=True)
    after = {name: processes.alive(stack.pidfile(name)) for name in ("kafka", "connect", "api")}
    assert before == after and all(after.values())
    assert time.monotonic() - started < 30
    assert stack.status()["postgres"] == "running"


def test_a_port_in_use_is_a_clear_error(stack, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        other = Stack(replace(stack.s, home=tmp_path, kafka_port=port))
        with pytest.raises(StackError, match=rf"kafka: port {port} is already in use"):
            other.start_kafka()


def test_status_command_lists_components(stack):
    out = subprocess.run([sys.executable, "-m", "cli.main", "stack", "status"],
                         capture_output=True, text=True, check=True).stdout
    for name in ("kafka", "connect", "postgres", "api", "worker-1"):
        assert name in out
