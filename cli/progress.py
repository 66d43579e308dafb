"""Progress lines for long operations: a campaign's send (``campaign watch``) and an upload.

Pure formatting lives in ``bar``/``campaign_line`` (tested without a stack); the loops only
fetch and print. On a terminal the line is redrawn in place; piped, one line per update.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TextIO

TERMINAL_STATUSES = ("done", "cancelled", "aborted")


def bar(done: int, total: int, width: int = 30) -> str:
    fraction = 1.0 if total <= 0 else min(1.0, done / total)
    filled = int(round(fraction * width))
    return f"[{'#' * filled}{'.' * (width - filled)}] {fraction * 100:5.1f}%"


def eta(seconds: float | None) -> str:
    if seconds is None:
        return "ETA --"
    seconds = int(seconds)
    return f"ETA {seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


def campaign_line(view: dict[str, Any]) -> str:
    counts = dict(view["counts"])
    pending = counts.pop("pending", 0)
    total = view["recipients"]
    outcomes = " ".join(f"{k}={v}" for k, v in counts.items() if v)
    return (f"{view['id']} {view['status']:<9} {bar(total - pending, total)} "
            f"{total - pending}/{total} {view['rate_per_s']:.0f}/s {eta(view['eta_s'])}"
            f"{'  ' + outcomes if outcomes else ''}")


def finished(view: dict[str, Any]) -> bool:
    """Every recipient has its outcome (a cancelled campaign records ``cancelled`` for the rest)."""
    return view["status"] in TERMINAL_STATUSES and view["counts"].get("pending", 0) == 0


def watch(fetch: Callable[[], dict[str, Any]], every_s: float, timeout_s: float | None,
          out: TextIO = sys.stdout) -> dict[str, Any]:
    """Redraw the campaign's line until every recipient has an outcome (or ``timeout_s``)."""
    tty = out.isatty()
    start = time.monotonic()
    while True:
        view = fetch()
        line = campaign_line(view)
        out.write(f"\r{line}\033[K" if tty else line + "\n")
        out.flush()
        if finished(view) or (timeout_s is not None and time.monotonic() - start > timeout_s):
            if tty:
                out.write("\n")
            return view
        time.sleep(every_s)


def file_chunks(path: Path, out: TextIO | None = None, chunk: int = 1 << 20) -> Iterator[bytes]:
    """Stream a file for an upload body, reporting bytes sent (the server counts the rows)."""
    with path.open("rb") as f:
        yield from upload_chunks(f, path.stat().st_size, path.name, out, chunk)


def upload_chunks(source: BinaryIO, total: int, name: str, out: TextIO | None = None,
                  chunk: int = 1 << 20) -> Iterator[bytes]:
    """``source``'s bytes for an upload body, a chunk at a time, with a progress line (on
    standard error unless ``out`` says otherwise)."""
    out = out or sys.stderr
    sent = 0
    tty = out.isatty()
    while data := source.read(chunk):
        sent += len(data)
        line = f"uploading {name} {bar(sent, total)} {sent >> 20}/{total >> 20} MiB"
        out.write(f"\r{line}\033[K" if tty else line + "\n")
        out.flush()
        yield data
    if tty:
        out.write("\n")
