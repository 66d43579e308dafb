"""Runs last (``end_of_session``, and last of those by file order): ``stack down`` leaves none of
our processes running."""

from __future__ import annotations

from pathlib import Path

import pytest

from stack import processes
from tests.waiting import wait_for

pytestmark = pytest.mark.end_of_session


def gone(pid: int) -> bool:
    """No such process, or only a zombie waiting for init to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def test_down_stops_every_process_it_started(stack):
    nodes = [stack.node_name(n) for n in range(1, stack.brokers + 1)]  # kafka, kafka-2, …
    names = [*nodes, "connect", *stack.app_names()]
    pids = {name: processes.alive(stack.pidfile(name)) for name in names}
    assert all(pids.values()), pids
    postmaster = Path(stack.s.home / "postgres" / "data" / "postmaster.pid")
    pg_pid = int(postmaster.read_text().split()[0])

    stack.down()

    for name, pid in pids.items():
        wait_for(lambda pid=pid: gone(pid), timeout_s=5, every_s=0.1,
                 explain=lambda name=name, pid=pid: f"{name} (pid {pid}) still running")
        assert not stack.pidfile(name).exists()
    wait_for(lambda: gone(pg_pid), timeout_s=5, every_s=0.1, explain=lambda: "postgres still running")
    assert stack.status()["postgres"] == "stopped"
