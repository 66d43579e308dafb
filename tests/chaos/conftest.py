import os

import pytest

# The fault-injection suite restarts the broker, Connect and PostgreSQL; on this 2-core machine it
# destabilised the rest of a CI run (the test process itself was aborted by librdkafka during a
# broker restart), so `./dev test` runs it only when asked: CRONSTREAM_CHAOS=1 (short mode) or
# CRONSTREAM_SOAK=1 (soak mode). See README, "Fault injection".
ENABLED = bool(os.environ.get("CRONSTREAM_CHAOS") or os.environ.get("CRONSTREAM_SOAK"))


def pytest_collection_modifyitems(items):
    for item in items:
        if "chaos" in str(item.fspath):
            item.add_marker(pytest.mark.chaos)
            if not ENABLED:
                item.add_marker(pytest.mark.skip(reason="fault injection runs with "
                                                        "CRONSTREAM_CHAOS=1 ./dev test tests/chaos"))
