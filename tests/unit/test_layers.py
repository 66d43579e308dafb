"""The layering contract (pyproject.toml ``[tool.importlinter]``): imports point down, from the
entry points through the composition root (``streams.worker``) and the guarantees to the
runtime and the topology; campaigns and execution never import each other, and scheduling
imports neither. ``lint-imports`` checks it on the tree, and fails on an import that points up."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")
PACKAGES = ("cli", "api", "ops", "stack", "streams")


def lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run([str(LINT), "--no-cache"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_tree_keeps_the_layering_contract():
    run = lint(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 kept, 0 broken" in run.stdout


def test_an_import_pointing_up_breaks_it(tmp_path: Path):
    """Scheduling importing the campaigns' fan-out (a cycle through the composition root) is
    reported, naming both modules."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    misfire = tmp_path / "streams" / "scheduling" / "misfire.py"
    misfire.write_text(misfire.read_text() + "\nfrom streams.campaigns import fanout  # noqa\n")
    run = lint(tmp_path)
    assert run.returncode != 0
    assert "BROKEN" in run.stdout
    assert "streams.scheduling.misfire -> streams.campaigns.fanout" in run.stdout
