"""Runs last (``end_of_session``, and last of those by file order): ``stack down`` leaves none of
our processes running."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from stack import processes

pytestmark = pytest.mark.end_of_session


def gone(pid: int, within_s: float = 5.0) -> bool:
    """No such process, or only a zombie waiting for init to reap it."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


def test_down_stops_every_process_it_started(stack):
    names = ["kafka", "connect", *stack.app_names()]
    pids = {name: processes.alive(stack.pidfile(name)) for name in names}
    assert all(pids.values()), pids
    postmaster = Path(stack.s.home / "postgres" / "data" / "postmaster.pid")
    pg_pid = int(postmaster.read_text().split()[0])

    stack.down()

    for name, pid in pids.items():
        assert gone(pid), f"{name} (pid {pid}) still running"
        assert not stack.pidfile(name).exists()
    assert gone(pg_pid), "postgres still running"
    assert stack.status()["postgres"] == "stopped"
