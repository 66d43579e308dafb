import json
import os
import time

import pytest

from bench.common import RESULTS, machine
from tests.chaos.checker import TALLY

# The fault-injection suite is part of `./dev test` in its short mode (20k-recipient campaigns,
# 20 s outages), but for its scenarios marked `extended`; CRONSTREAM_SOAK=1 selects the soak mode
# (bigger campaigns, longer outages, every scenario: what `./dev test --extended` runs). At the
# end of a run the checker's tally (scenarios, duration, events judged, faults injected,
# violations) is printed and written to bench/results/ (see docs/testing.md, "Fault injection").


def pytest_collection_modifyitems(items):
    soak = bool(os.environ.get("CRONSTREAM_SOAK"))
    for item in items:
        if "chaos" in str(item.fspath):
            item.add_marker(pytest.mark.chaos)
        if item.get_closest_marker("extended") and not soak:
            # what does not fit CI's 45 minutes beside the rest: `./dev test --extended` runs it
            # (in the soak mode), and docs/testing.md keeps its last result
            item.add_marker(pytest.mark.skip(reason="on demand: ./dev test --extended runs it"))


def pytest_runtest_logreport(report):
    if "tests/chaos/" in report.nodeid and report.when == "call":
        TALLY.scenarios += 1
        TALLY.seconds += report.duration


def pytest_terminal_summary(terminalreporter):
    if not TALLY.scenarios:
        return
    mode = "soak" if os.environ.get("CRONSTREAM_SOAK") else "short"
    figures = {"mode": mode, **TALLY.__dict__, "seconds": round(TALLY.seconds)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"chaos-{mode}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"figures": figures, "machine": machine()}, indent=2))
    terminalreporter.write_line(
        f"fault injection ({mode}): {TALLY.scenarios} scenarios in {TALLY.seconds / 60:.1f} min, "
        f"{TALLY.events} events judged, {TALLY.faults} faults injected, "
        f"{TALLY.violations} violations ({path.name})")
    for line in TALLY.figures:
        terminalreporter.write_line(f"  {line}")
