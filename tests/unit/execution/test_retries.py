"""Which failures the executor retries (``streams.execution.retries``)."""

import pytest

from streams.execution.retries import retryable


@pytest.mark.parametrize("status, expected", [
    (None, True), (500, True), (503, True), (429, True), (408, True),
    (400, False), (401, False), (404, False), (410, False),
])
def test_retryable(status, expected):
    assert retryable(status) is expected


def test_a_throttled_attempt_waits_the_jobs_backoff_while_the_deadline_allows():
    from streams.execution.retries import throttle_wait_s
    from streams.runtime.backoff import backoff_s

    wait = throttle_wait_s(3, 1.0, 60.0, "f@1", now_ms=1_000, run_by_ms=60_000)
    assert wait == backoff_s(3, 1.0, 60.0, "f@1") and 2.0 <= wait <= 4.0
    assert throttle_wait_s(30, 1.0, 60.0, "f@1", 0, 3_600_000) <= 60.0, "capped"
    assert throttle_wait_s(3, 1.0, 60.0, "f@1", now_ms=59_000, run_by_ms=60_000) is None
