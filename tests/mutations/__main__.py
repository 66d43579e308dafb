"""Run the mutation check: ``./dev test --mutations [NAME ...]`` (every mutation by default;
``--list`` prints the table).

For each mutation of ``tests.mutations.table``: copy the repository's files (tracked and
untracked, not ignored) to a temporary folder, apply the edit there (its anchor must be found
exactly once, or the run stops: the table has drifted from the code), stop the stack's workers
and API so they start again from the copy, run the mutation's tests in the copy with pytest
against the same stack (``CRONSTREAM_HOME`` and ports as set, else this checkout's ``.local``),
and stop the workers and API again so nothing keeps running mutated code. The working tree is
never touched. A mutation passes the check when at least one of its tests fails (an assertion,
not an error in setup); the failing assertion's first line is printed and written with the
tally to ``bench/results/mutations-*.json``. Exit status 1 if any mutation left its tests green.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from tests.mutations.table import MUTATIONS, Edit, Mutation

ROOT = Path(__file__).resolve().parents[2]
APPS = ("api",)  # and every worker-N: whatever the stack runs of cronstream's own code


class Drifted(SystemExit):
    """The table no longer matches the code: an anchor is missing or not unique."""


def applied(text: str, edit: Edit, name: str = "") -> str:
    """``text`` with the edit made; ``Drifted`` unless its anchor occurs exactly once."""
    found = text.count(edit.anchor)
    if found != 1:
        raise Drifted(f"mutation {name}: its anchor is found {found} times in {edit.path} (must "
                      f"be exactly once; re-anchor it in tests/mutations/table.py):\n{edit.anchor}")
    return text.replace(edit.anchor, edit.replacement)


def mutate(root: Path, mutation: Mutation) -> None:
    """Make every edit of the mutation in the tree at ``root`` (checked first, all of them)."""
    changed = {}
    for edit in mutation.edits:
        path = root / edit.path
        changed[path] = applied(changed.get(path) or path.read_text(), edit, mutation.name)
    for path, text in changed.items():
        path.write_text(text)


def copy_tree(into: Path) -> None:
    """The repository's files as they are now (tracked and untracked, not ignored)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            check=True, capture_output=True).stdout.split(b"\0")
    for name in filter(None, listed):
        source = ROOT / name.decode()
        if source.is_file():
            target = into / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def stop_apps() -> None:
    """Stop the stack's workers and API (they are started again by the next test session)."""
    from stack import processes
    from stack.local import Stack
    from streams.runtime import settings

    stack = Stack(settings.load())
    names = [*APPS, *(p.stem for p in stack.s.run_dir.glob("worker-*.pid"))]
    for name in names:
        processes.stop(stack.pidfile(name), timeout_s=60)


@dataclass
class Result:
    name: str
    guarantee: str
    tests: list[str]
    red: bool
    failures: dict[str, str]  # node id -> the failing assertion (its first line or two)
    errors: dict[str, str]
    seconds: float


def failing_lines(junit: Path) -> tuple[dict[str, str], dict[str, str], int]:
    """The failed and errored test cases of a JUnit XML report (node id → first line of the
    message), and how many cases passed."""
    failures, errors, passed = {}, {}, 0
    if not junit.exists():
        return failures, errors, passed
    for case in ET.parse(junit).getroot().iter("testcase"):
        node = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        failed, errored = case.find("failure"), case.find("error")
        if failed is not None:
            failures[node] = _first_line(failed)
        elif errored is not None:
            errors[node] = _first_line(errored)
        elif case.find("skipped") is None:
            passed += 1
    return failures, errors, passed


def _first_line(element: ET.Element) -> str:
    """The failure's message: its first line, and the next one when the first is a wait that
    gave up (``tests.waiting.wait_for`` puts its account of the system there)."""
    message = element.get("message") or element.text or ""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    shown = lines[:2] if lines and "condition not met" in lines[0] else lines[:1]
    return " / ".join(shown)[:400]


def run(mutation: Mutation, keep: bool = False) -> Result:
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f"cronstream-mutation-{mutation.name}-"))
    try:
        copy_tree(work)
        mutate(work, mutation)
        env = {**os.environ, "PYTHONPATH": str(work), "CRONSTREAM_KEEP_STACK": "1"}
        env.setdefault("CRONSTREAM_HOME", str(ROOT / ".local"))
        junit = work / "mutation-junit.xml"
        stop_apps()
        print(f"[mutations] {mutation.name}: {', '.join(e.path for e in mutation.edits)} "
              f"edited in {work}; running "
              f"{' '.join(mutation.tests)}", flush=True)
        subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                        f"--junitxml={junit}", *mutation.tests], cwd=work, env=env, check=False)
        failures, errors, _ = failing_lines(junit)
    finally:
        stop_apps()
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return Result(mutation.name, mutation.guarantee, list(mutation.tests), bool(failures),
                  failures, errors, round(time.monotonic() - started))


def main() -> int:
    parser = argparse.ArgumentParser(prog="./dev test --mutations",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="print the table and exit")
    parser.add_argument("--keep", action="store_true", help="keep each mutated copy")
    args = parser.parse_args()
    known = {m.name: m for m in MUTATIONS}
    unknown = [n for n in args.names if n not in known]
    if unknown:
        parser.error(f"no such mutation: {', '.join(unknown)} (--list shows them)")
    chosen = [known[n] for n in args.names] or list(MUTATIONS)
    for mutation in chosen:  # every anchor checked before anything runs
        for edit in mutation.edits:
            applied((ROOT / edit.path).read_text(), edit, mutation.name)
    if args.list:
        for m in chosen:
            print(f"{m.name:16} {m.guarantee:32} {', '.join(e.path for e in m.edits)} -> "
                  f"{', '.join(m.tests)}")
        return 0
    results = []
    for mutation in chosen:
        result = run(mutation, args.keep)
        results.append(result)
        verdict = "RED (caught)" if result.red else "GREEN (survived)"
        print(f"[mutations] {mutation.name}: {verdict} in {result.seconds} s", flush=True)
        for node, line in {**result.failures, **result.errors}.items():
            print(f"    {node}: {line}", flush=True)
    from bench.common import RESULTS

    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"mutations-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps([r.__dict__ for r in results], indent=2))
    survived = [r.name for r in results if not r.red]
    print(f"[mutations] {len(results) - len(survived)} of {len(results)} caught"
          + (f"; survived: {', '.join(survived)}" if survived else "") + f" ({path})")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
