"""The composition root (``streams.worker``): importing any module builds nothing, and ``wire``
registers every agent, punctuator and table ``streams.topology`` declares for the worker."""

from __future__ import annotations

import inspect
import subprocess
import sys
from dataclasses import replace

from streams.runtime import settings
from streams.runtime.app import build
from streams.topology import PROCESSORS, TABLES


def test_importing_every_module_builds_no_app_and_connects_nowhere():
    """In a fresh interpreter: import every module of the packages; no faust app exists after,
    and faust's consumer is not patched (``streams.runtime.committed_seek`` patches it only when
    a worker's app is built)."""
    code = """
import importlib, pkgutil, sys
import faust
from faust.transport.consumer import Consumer
wait_before = Consumer._wait_next_records
import streams, api, cli, ops, stack
for package in (streams, api, cli, ops, stack):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(info.name)
import gc
apps = [o for o in gc.get_objects() if isinstance(o, faust.App)]
assert not apps, apps
assert Consumer._wait_next_records is wait_before, "faust patched at import"
print("ok")
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"CRONSTREAM_BOOTSTRAP": "127.0.0.1:1", "PATH": ""})
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr


def test_wire_registers_every_declared_processor_and_table(tmp_path):
    from streams import worker

    rt = build(replace(settings.load(), home=tmp_path), "wire-test", replication_factor=3)
    worker.wire(rt)
    agents = {name.rsplit(".", 1)[-1] for name in rt.app.agents}
    timers = {inspect.unwrap(task).__name__ for task in rt.app._app_tasks}  # noqa: SLF001
    declared = {p.name: p.kind for p in PROCESSORS}
    assert agents == {n for n, kind in declared.items() if kind == "agent"}
    assert timers == {n for n, kind in declared.items() if kind == "punctuator"}
    assert {t.name for t in TABLES} == set(rt.app.tables)
    assert rt.app.conf.topic_replication_factor == 3
