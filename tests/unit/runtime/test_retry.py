"""Retry policy: which failures are retried, and how long to wait (``streams.runtime.retry``)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.runtime import retry


@pytest.mark.parametrize("status, expected", [
    (None, True), (500, True), (503, True), (429, True), (408, True),
    (400, False), (401, False), (404, False), (410, False),
])
def test_retryable(status, expected):
    assert retry.retryable(status) is expected


@given(st.integers(1, 30), st.floats(0.01, 10), st.floats(0.01, 600), st.text(max_size=20))
def test_backoff_is_capped_jittered_and_deterministic(attempt, initial, cap, seed):
    wait = retry.backoff_s(attempt, initial, cap, seed)
    step = min(cap, initial * 2 ** (attempt - 1))
    assert step * 0.5 <= wait <= step
    assert wait == retry.backoff_s(attempt, initial, cap, seed)


def test_backoff_grows_exponentially():
    waits = [retry.backoff_s(a, 1, 1000, "f") for a in range(1, 6)]
    assert all(b > a for a, b in zip(waits, waits[1:], strict=False))
