"""Runs one Kafka admin call in a short-lived child Python, so no librdkafka client outlives it.

Why: a librdkafka client kept alive in a long-running process that is not a worker (the test
run, ``stack up``'s caller) is alive across every broker restart that process lives through,
and librdkafka was seen to abort such a process there (``Fatal Python error: Aborted`` in a CI
run's pytest, inside the fault suite's broker restart, with only the AdminClient that ``stack
up`` had created alive), or to keep it stuck on timeouts for minutes afterwards. A child that
asks and exits takes its client with it. The child ends with ``os._exit``: destroying a client
with nothing left to say can still wait forever.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from streams.runtime.settings import REPO_ROOT

_CHILD = """
import importlib, json, os, sys, traceback
module, _, name = sys.argv[1].partition(":")
try:
    args, kwargs = json.loads(sys.argv[2])
    result = getattr(importlib.import_module(module), name)(*args, **kwargs)
    sys.stdout.write(json.dumps(result))
    sys.stdout.flush()
except BaseException:
    traceback.print_exc()
    sys.stderr.flush()
    os._exit(1)
os._exit(0)
"""


class ChildCallFailed(RuntimeError):
    """The child raised, aborted or ran out of time; the message ends with its stderr's tail."""


def call(target: str, *args: Any, timeout_s: float, env: dict[str, str] | None = None,
         **kwargs: Any) -> Any:
    """``module:function(*args, **kwargs)`` run in a child Python started in the repository;
    returns its JSON result. Arguments and the result must be JSON values. ``env`` is added to
    this process's environment for the child (a secure stack's Kafka settings)."""
    try:
        child = subprocess.run([sys.executable, "-c", _CHILD, target, json.dumps([args, kwargs])],
                               capture_output=True, text=True, timeout=timeout_s, cwd=REPO_ROOT,
                               env={**os.environ, **env} if env else None)
    except subprocess.TimeoutExpired as exc:
        raise ChildCallFailed(f"{target} did not answer within {timeout_s:.0f}s") from exc
    if child.returncode != 0:
        raise ChildCallFailed(f"{target} failed (exit code {child.returncode}): "
                              f"{child.stderr.strip()[-2000:]}")
    return json.loads(child.stdout)
