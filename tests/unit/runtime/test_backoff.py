"""How long to wait before trying again (``streams.runtime.backoff``)."""

from hypothesis import given
from hypothesis import strategies as st

from streams.runtime.backoff import backoff_s


@given(st.integers(1, 30), st.floats(0.01, 10), st.floats(0.01, 600), st.text(max_size=20))
def test_backoff_is_capped_jittered_and_deterministic(attempt, initial, cap, seed):
    wait = backoff_s(attempt, initial, cap, seed)
    step = min(cap, initial * 2 ** (attempt - 1))
    assert step * 0.5 <= wait <= step
    assert wait == backoff_s(attempt, initial, cap, seed)


def test_backoff_grows_exponentially():
    waits = [backoff_s(a, 1, 1000, "f") for a in range(1, 6)]
    assert all(b > a for a, b in zip(waits, waits[1:], strict=False))
