"""What every benchmark prints and records: the figures, the machine and the versions."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx

from stack import processes
from stack.local import Stack
from streams.runtime import settings
from streams.runtime.admin import client as admin_client
from streams.runtime.admin import committed_offsets, end_offsets
from streams.runtime.settings import REPO_ROOT, Settings
from streams.topology import TopicSpec, consumer_group

RESULTS = REPO_ROOT / "bench" / "results"


def machine() -> dict[str, Any]:
    mem_kb = int(next(line for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal")).split()[1])
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")), "?")
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.split("\n")[0]
    return {
        "cores": os.cpu_count(), "ram_gib": round(mem_kb / 1024 / 1024, 1), "cpu": cpu,
        "python": platform.python_version(), "java": java, "kafka": "3.9.1 (KRaft, 1 node)",
        "faust-streaming": version("faust-streaming"), "confluent-kafka": version("confluent-kafka"),
    }


def report(name: str, figures: dict[str, Any], params: dict[str, Any]) -> Path:
    result = {"benchmark": name, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "params": params, "figures": figures, "machine": machine()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"\n== {name} ==")
    for key, value in figures.items():
        if isinstance(value, dict) and any(isinstance(v, dict | list) for v in value.values()):
            print(f"  {key}:")  # a group of figures, such as one of several spikes
            for inner, figure in value.items():
                print(f"    {inner:<32} {figure}")
        else:
            print(f"  {key:<34} {value}")
    m = result["machine"]
    print(f"  machine: {m['cores']} cores, {m['ram_gib']} GiB, {m['cpu']}; python {m['python']}, "
          f"faust-streaming {m['faust-streaming']}, kafka {m['kafka']}")
    print(f"  result: {path.relative_to(REPO_ROOT)}")
    return path


def count_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type for a count given on a benchmark's command line: a whole number of at
    least ``minimum``. Refused at parse time, naming the value, rather than after minutes of
    loading a million jobs (``--minutes 0`` once got that far before an IndexError)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        return value
    return parse


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def topic_ends(bootstrap: str, topic: str) -> dict[int, int]:
    """The end offset of every partition of ``topic``."""
    partitions = admin_client(bootstrap).list_topics(topic, timeout=10).topics[topic].partitions
    ends = end_offsets(bootstrap, [(topic, p) for p in partitions])
    return {p: end for (_, p), end in ends.items()}


def group_lag(bootstrap: str, group: str, topic: str) -> int:
    """Records of ``topic`` the consumer group has not committed yet (Kafka's own offsets)."""
    committed = committed_offsets(bootstrap, group)
    return sum(end - committed.get((topic, p), 0) for p, end in topic_ends(bootstrap, topic).items())


def _status_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def rss_peak_mib(pid: int) -> float:
    """The process's peak resident memory (VmHWM)."""
    return _status_mib(pid, "VmHWM")


def rss_mib(pid: int) -> float:
    """The process's resident memory now (VmRSS)."""
    return _status_mib(pid, "VmRSS")


def stack_with_workers(count: int, ready_timeout_s: float = 900) -> tuple[Settings, Stack, list[str]]:
    """The local stack (started if needed; no API) with workers 1..``count`` running. A worker
    may take minutes to be ready when an earlier run's tombstones are still being applied."""
    conf = settings.load()
    stack = Stack(conf)
    stack.up(with_app=False)
    workers = [f"worker-{i}" for i in range(1, count + 1)]
    for name in workers:
        stack.start_worker(name, ready_timeout_s=ready_timeout_s)
    return conf, stack, workers


def wait_consumed(bootstrap: str, topic: TopicSpec, every_s: float = 1.0,
                  group: str | None = None) -> float:
    """Seconds until the group that consumes ``topic`` (``streams.topology.consumer_group``),
    or ``group``, has consumed everything written to it so far."""
    group = group or consumer_group(topic)
    started = time.monotonic()
    while group_lag(bootstrap, group, topic.name) > 0:
        time.sleep(every_s)
    return time.monotonic() - started


def standbys_behind(conf: Settings, workers: list[str]) -> int:
    """Changelog records the workers' standbys have not read yet (``streams.runtime.standbys``), from
    each worker's ``/metrics``."""
    total = 0.0
    for name in workers:
        port = conf.worker_metrics_port + int(name.rsplit("-", 1)[1])
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        total += sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                     if line.startswith("cronstream_standby_behind_records{"))
    return int(total)


def wait_standbys(conf: Settings, workers: list[str], every_s: float = 2.0) -> float:
    """Seconds until every worker's standbys have read their changelogs to the end."""
    started = time.monotonic()
    while standbys_behind(conf, workers) > 0:
        time.sleep(every_s)
    return time.monotonic() - started


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds used so far), for every process now running."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(entry)) is not None:
            table[int(entry.name)] = stat
    return table


def _stat(entry: Path) -> tuple[int, float] | None:
    """(parent pid, CPU seconds used so far) of a process or thread (``/proc/PID`` or
    ``/proc/PID/task/TID``), or None if it ended while we looked. The name field may hold
    spaces and parentheses, so the fields are counted from its closing one."""
    try:
        fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def jit_cpu_seconds(roots: dict[str, int]) -> dict[str, float]:
    """CPU seconds the JIT compiler threads (C1, C2) of each JVM of the stack (broker, Connect)
    have used so far; part of that JVM's ``cpu_seconds``, not added to it. A JVM that meets a
    kind of traffic for the first time compiles its code paths for it while it serves it, on
    the same two cores as everything else: this is what a fresh stack pays for being fresh."""
    used = {}
    for name in ("kafka", "connect"):
        if name not in roots:
            continue
        total = 0.0
        for task in Path(f"/proc/{roots[name]}/task").iterdir():
            try:
                compiler = "CompilerThre" in (task / "comm").read_text()
            except OSError:  # the thread ended while we looked
                continue
            if compiler and (stat := _stat(task)) is not None:
                total += stat[1]
        used[f"{name} JIT compiler threads"] = total
    return used


def cpu_seconds(roots: dict[str, int]) -> dict[str, float]:
    """CPU seconds (user + system) each component has used so far: its root process and every
    descendant still running (PostgreSQL's backends; a JVM's threads are in its process), less
    the trees of the other components (the benchmark may have started the whole stack). Two
    readings around a run tell where a box's cores went during it."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    used, others = {}, set(roots.values())
    for name, root in roots.items():
        total, todo = 0.0, [root]
        while todo:
            pid = todo.pop()
            total += table.get(pid, (0, 0.0))[1]
            todo.extend(child for child in children.get(pid, []) if child not in others)
        used[name] = total
    return used


def cpu_share(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    """Each component's average use of the box over ``seconds``, in cores (1.0 = one core)."""
    return {name: round((after[name] - before.get(name, 0.0)) / seconds, 2) for name in after}


def component_pids(stack: Stack, workers: list[str]) -> dict[str, int]:
    """The root process of each part of the local stack that runs, and of this benchmark."""
    roots = {name: stack.pidfile(name) for name in ("kafka", "connect", "ses", "api", *workers)}
    pids = {name: pid for name, path in roots.items() if (pid := processes.alive(path))}
    postmaster = stack.s.home / "postgres" / "data" / "postmaster.pid"
    if postmaster.exists():
        pids["postgres"] = int(postmaster.read_text().split()[0])
    pids["benchmark"] = os.getpid()
    return pids
