"""Pid files that name exactly the processes the stack started, and nothing else.

A pid file holds the pid and the process start time (``/proc/<pid>/stat`` field 22); a pid
whose start time differs is a recycled pid belonging to someone else and is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name may contain spaces; fields after the closing paren are fixed
    return stat.rsplit(")", 1)[1].split()[19]


def write(pidfile: Path, pid: int) -> None:
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    pidfile.write_text(f"{pid} {_start_time(pid) or ''}\n")


def alive(pidfile: Path) -> int | None:
    """The pid recorded in ``pidfile`` if that very process still runs."""
    try:
        pid_s, _, started = pidfile.read_text().strip().partition(" ")
        pid = int(pid_s)
    except (OSError, ValueError):
        return None
    current = _start_time(pid)
    if current is None or (started and current != started):
        return None
    try:  # it may have exited since: stop() asks while the process it signalled goes
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
    return None if state == "Z" else pid


def spawn(pidfile: Path, argv: list[str], log: Path, env: dict[str, str] | None = None,
          cwd: Path | None = None) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd, start_new_session=True)
    write(pidfile, proc.pid)
    return proc.pid


def stop(pidfile: Path, timeout_s: float = 20.0, sig: int = signal.SIGTERM) -> bool:
    """Stop the recorded process (TERM, then KILL after ``timeout_s``); True if one was stopped."""
    pid = alive(pidfile)
    if pid is None:
        pidfile.unlink(missing_ok=True)
        return False
    os.kill(pid, sig)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive(pidfile) == pid:
        _reap(pid)
        time.sleep(0.1)
    if alive(pidfile) == pid:
        os.kill(pid, signal.SIGKILL)
        while alive(pidfile) == pid:
            _reap(pid)
            time.sleep(0.05)
    pidfile.unlink(missing_ok=True)
    return True


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
