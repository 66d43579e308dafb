"""What starting any part of the local stack shares: the error a failed part raises, the one
line the stack says things in, whether a port is free, and the wait for a part's health.

It exists so each part (``kafka_nodes``, ``kafka_connect``, ``postgres``, ``ses_launcher``,
``apps``) starts, checks and fails the same way, and so none of them imports another for it.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

from stack import processes


class StackError(RuntimeError):
    """A component failed: the message names it, the reason, and where its log is."""

    def __init__(self, component: str, reason: str, log: Path | None = None,
                 tail: int = 0) -> None:
        where = f" (log: {log})" if log else ""
        super().__init__(f"{component}: {reason}{where}{_log_tail(log, tail)}")


def _log_tail(log: Path | None, lines: int) -> str:
    """The log's last ``lines`` lines, indented, for an error a run in CI reports without the
    file: a region's API exited during start-up there and its log was gone with the checkout."""
    if not lines or log is None or not log.exists():
        return ""
    with log.open("rb") as f:
        f.seek(max(0, f.seek(0, 2) - 8192))
        last = f.read().decode("utf-8", "replace").splitlines()[-lines:]
    return "".join(f"\n    {line}" for line in last)


def say(message: str) -> None:
    """One line of the stack's progress, on stdout, as ``stack up`` and ``stack down`` print."""
    print(f"[stack] {message}", flush=True)


def port_busy(port: int, host: str = "127.0.0.1") -> bool:
    """Something listens on the port."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def port_taken(port: int, host: str = "127.0.0.1") -> bool:
    """A server could not listen on the port: something listens there, or a connection holds it
    as its local end (a port in the kernel's ephemeral range, 32768 up, can be any client's)."""
    if port_busy(port, host):
        return True
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def running_or_free(component: str, pidfile: Path, ports: tuple[int, ...], env_hint: str,
                    log: Path, what: str, host: str = "127.0.0.1") -> bool:
    """True if our process already runs (say so); raise if a port is taken by someone else."""
    if processes.alive(pidfile):
        say(f"{what} already running on {host}:{ports[0]}")
        return True
    for port in ports:
        if port_taken(port, host):
            raise StackError(component, f"port {port} is already in use by another process; "
                             f"set {env_hint}", log)
    return False


def wait_healthy(component: str, check: Callable[[], bool], timeout_s: float, log: Path,
                 pidfile: Path | None = None) -> None:
    """Poll ``check`` every half second until it says yes; raise if the process the pid file
    names exits first, or after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pidfile is not None and processes.alive(pidfile) is None:
            raise StackError(component, "process exited during start-up", log, tail=12)
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - not ready yet, whatever the client says
            pass
        time.sleep(0.5)
    raise StackError(component, f"not healthy after {timeout_s:.0f}s", log)
