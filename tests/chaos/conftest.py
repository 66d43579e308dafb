import json
import os
import time

import pytest

from bench.common import RESULTS, machine
from tests.chaos.checker import TALLY

# The fault-injection suite runs with CRONSTREAM_CHAOS=1 (short mode) or CRONSTREAM_SOAK=1 (soak:
# bigger campaigns, longer outages). It passed whole in a fresh-clone CI run; the next run showed
# the API's topic views stuck after the broker restart (fixed in streams/views.py, not yet proven
# in CI), so it stays out of `./dev test` until it has passed there again (README). At the end of a run
# the checker's tally (scenarios, duration, events judged, faults injected, violations) is
# printed and written to bench/results/ (see README, "Fault injection").


ENABLED = bool(os.environ.get("CRONSTREAM_CHAOS") or os.environ.get("CRONSTREAM_SOAK"))


def pytest_collection_modifyitems(items):
    for item in items:
        if "chaos" in str(item.fspath):
            item.add_marker(pytest.mark.chaos)
            if not ENABLED:
                item.add_marker(pytest.mark.skip(reason="fault injection runs with "
                                                        "CRONSTREAM_CHAOS=1 ./dev test tests/chaos"))


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
