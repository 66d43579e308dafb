"""Where a benchmark's cores went: CPU per component's process tree, from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench.common import cpu_seconds, cpu_share


def test_a_components_cpu_includes_its_running_descendants():
    # a shell (the component's root) whose child burns CPU: the child's seconds count for the root
    program = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n" \
              "time.sleep(30)"
    burn = f"{sys.executable} -c '{program}'"
    root = subprocess.Popen(["sh", "-c", f"{burn}; true"])
    try:
        deadline = time.monotonic() + 10
        used = {"root": 0.0}
        while time.monotonic() < deadline and used["root"] < 0.35:
            time.sleep(0.1)
            used = cpu_seconds({"root": root.pid, "gone": 2**22 + 7})
        assert used["root"] >= 0.35, used
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
        deadline = time.monotonic() + 10
        used = cpu_seconds({"parent": os.getpid(), "child": child.pid})
        while time.monotonic() < deadline and used["child"] < 0.35:
            time.sleep(0.1)
            used = cpu_seconds({"parent": os.getpid(), "child": child.pid})
        alone = cpu_seconds({"parent": os.getpid()})["parent"]
        assert used["child"] >= 0.35
        assert alone - used["parent"] >= 0.3  # counted in the parent only when it stands alone
    finally:
        child.kill()
        child.wait()
