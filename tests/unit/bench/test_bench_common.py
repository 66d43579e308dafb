"""Where a benchmark's cores went: CPU per component's process tree, from /proc."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from bench.common import count_at_least, cpu_seconds, cpu_share
from tests.waiting import wait_for


def test_a_components_cpu_includes_its_running_descendants():
    # a shell (the component's root) whose child burns CPU: the child's seconds count for the root
    program = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n" \
              "time.sleep(30)"
    burn = f"{sys.executable} -c '{program}'"
    root = subprocess.Popen(["sh", "-c", f"{burn}; true"])
    try:
        # until the child's 0.4 s of CPU count for the root
        used = wait_for(lambda: (u := cpu_seconds({"root": root.pid, "gone": 2**22 + 7}))
                        ["root"] >= 0.35 and u, timeout_s=10, every_s=0.1)
        assert used["gone"] == 0.0  # a component that is not running used nothing
    finally:
        subprocess.run(["pkill", "-P", str(root.pid)], check=False)
        root.kill()
        root.wait()


def test_shares_are_cores_over_the_window():
    assert cpu_share({"kafka": 10.0, "ses": 1.0}, {"kafka": 25.0, "ses": 1.5}, 10.0) == {
        "kafka": 1.5, "ses": 0.05}


def test_a_component_started_by_another_counts_for_itself_only():
    """The benchmark starts the stack: the broker's CPU is the broker's, not the benchmark's."""
    program = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n" \
              "time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", program])
    try:
        used = wait_for(lambda: (u := cpu_seconds({"parent": os.getpid(), "child": child.pid}))
                        ["child"] >= 0.35 and u, timeout_s=10, every_s=0.1)
        alone = cpu_seconds({"parent": os.getpid()})["parent"]
        assert alone - used["parent"] >= 0.3  # counted in the parent only when it stands alone
    finally:
        child.kill()
        child.wait()


def test_a_count_on_a_benchmarks_command_line_is_refused_below_its_minimum():
    assert count_at_least(1)("3") == 3
    assert count_at_least(0)("0") == 0
    with pytest.raises(argparse.ArgumentTypeError, match="0 is less than 1"):
        count_at_least(1)("0")
    with pytest.raises(argparse.ArgumentTypeError, match="'ten' is not a whole number"):
        count_at_least(1)("ten")


def test_a_benchmark_refuses_a_bad_count_before_it_starts_anything():
    """``--minutes 0`` once loaded 1.1M jobs before failing; now argparse stops it, naming it."""
    for command in (["bench.spike", "--minutes", "0"], ["bench.fanout", "--recipients", "-5"],
                    ["bench.failover", "--workers", "1"]):
        done = subprocess.run([sys.executable, "-m", *command], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 2, (command, done.stderr)
        assert f"argument {command[1]}: " in done.stderr, done.stderr
