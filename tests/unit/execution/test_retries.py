"""Which failures the executor retries (``streams.execution.retries``)."""

import pytest

from streams.execution.retries import retryable


@pytest.mark.parametrize("status, expected", [
    (None, True), (500, True), (503, True), (429, True), (408, True),
    (400, False), (401, False), (404, False), (410, False),
])
def test_retryable(status, expected):
    assert retryable(status) is expected
