"""Coordinator requests made from a child process, so that a librdkafka abort kills the child
and the worker survives.

Why: librdkafka aborts the whole process with `rd_kafka_enq_once_del_source_return: Assertion
'eonce->refcnt > 0' failed` when a request sent to a group coordinator loses its connection
halfway. This covers DescribeConsumerGroups and the other coordinator-targeted admin requests.
The cause is a use-after-free in the error path of `rd_kafka_admin_coord_request`:
confluentinc/librdkafka#4605 is open, and a fix is proposed in confluentinc/librdkafka#5397.
Remove this module once a librdkafka release carries that fix.

The walkers' ownership fence (`streams.campaigns.ownership`) describes the workers' group
several times a second while a campaign sends. Whenever the group's coordinator broker went
away, a worker was lost to this abort: it happened at a KRaft controller kill on three brokers
(`tests/chaos/test_cluster_faults.py`).

Here such requests run in one long-lived child Python that reads requests on its stdin and
answers on its stdout:
- If the child dies or does not answer in time, the call raises `ChildFailed` and the next
  call starts a new child. The fence takes that like any coordinator outage: it waits and asks
  again, and nothing has been sent while it waits.
- An error the request itself raises (a timeout, a coordinator still loading) comes back as
  `ChildFailed` too, and the child is kept.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import threading
from typing import IO, Any

from streams.runtime.settings import REPO_ROOT

# the child: one request a line (["module:function", [args]]), one JSON answer a line; it ends
# when its parent closes the pipe (the parent died or replaced it)
_SERVE = """
import importlib, json, os, sys
for line in sys.stdin:
    target, args = json.loads(line)
    module, _, name = target.partition(":")
    try:
        out = {"result": getattr(importlib.import_module(module), name)(*args)}
    except Exception as exc:
        out = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(out) + "\\n")
    sys.stdout.flush()
os._exit(0)
"""


class ChildFailed(RuntimeError):
    """The request failed in the child, or the child died or did not answer in time."""


class AdminChild:
    """One child Python that makes requests for this process, one at a time (a lock: callers
    come from the thread pool). Starts on the first call; its stderr is this process's, so an
    abort is in the worker's log."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._child: subprocess.Popen[str] | None = None
        self.started = 0  # children started so far (a test reads it)

    def call(self, target: str, *args: Any, timeout_s: float) -> Any:
        """``module:function(*args)`` in the child; its JSON result. Arguments and result must
        be JSON values."""
        with self._lock:
            child = self._child
            if child is not None and child.poll() is not None:
                self._stop(child)  # died between calls: reaped, its pipes closed
                child = None
            if child is None:
                child = self._start()
            assert child.stdin is not None and child.stdout is not None
            try:
                child.stdin.write(json.dumps([target, list(args)]) + "\n")
                child.stdin.flush()
                line = _read_line(child.stdout, timeout_s)
            except (OSError, ValueError, TimeoutError) as exc:
                self._stop(child)
                raise ChildFailed(f"{target}: no answer from the child (pid {child.pid}, "
                                  f"exit code {child.poll()}): {exc}") from exc
        answer = json.loads(line)
        if "error" in answer:
            raise ChildFailed(f"{target}: {answer['error']}")
        return answer["result"]

    def _start(self) -> subprocess.Popen[str]:
        self._child = subprocess.Popen(
            [sys.executable, "-c", _SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, cwd=REPO_ROOT)
        self.started += 1
        return self._child

    def _stop(self, child: subprocess.Popen[str]) -> None:
        """SIGKILL our own child by its pid (it may be stuck inside librdkafka) and reap it."""
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        child.wait()
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()
        if self._child is child:
            self._child = None


def _read_line(stream: IO[str], timeout_s: float) -> str:
    """One line from the child, or TimeoutError; EOF (the child died) is a ValueError."""
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        if not selector.select(timeout_s):
            raise TimeoutError(f"no answer within {timeout_s:.1f}s")
    line = stream.readline()
    if not line:
        raise ValueError("the child ended")
    return line
