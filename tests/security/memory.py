"""The kernel's record of a process's resident memory: the attacks on the API's memory are
judged from it, not from anything the API says."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

ALLOWED_GROWTH_KB = 100 * 1024  # the acceptance: within 100 MB of where it was


def status_kb(pid: int, field: str) -> int:
    """``VmHWM`` (peak RSS) or ``VmRSS`` of ``pid``, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def reset_peak(pid: int) -> int:
    """Reset the process's peak RSS to its current RSS (``echo 5 > clear_refs``); returns it."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return status_kb(pid, "VmHWM")


def chunks(total_mb: int, first: bytes = b"", fill: bytes = b" ") -> Iterator[bytes]:
    """``total_mb`` MiB in 1 MiB pieces, starting with ``first``, never a newline after it."""
    piece = fill * (1 << 20)
    yield first + piece[len(first):]
    for _ in range(total_mb - 1):
        yield piece
