"""IP pool warm-up caps (streams.campaigns.warmup)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.campaigns import warmup

DAY = warmup.DAY_MS


def plan(initial: int = 1000, growth: float = 2.0, ceiling: int | None = 5000) -> dict:
    return {"warmup_start_ms": 10 * DAY + 5, "initial_daily_cap": initial, "growth": growth,
            "max_daily_cap": ceiling}


def test_the_cap_grows_per_utc_day_up_to_the_ceiling():
    assert warmup.daily_cap(plan(), 10 * DAY + 5) == 1000
    assert warmup.daily_cap(plan(), 11 * DAY - 1) == 1000  # same UTC day
    assert warmup.daily_cap(plan(), 11 * DAY) == 2000
    assert warmup.daily_cap(plan(), 12 * DAY) == 4000
    assert warmup.daily_cap(plan(), 13 * DAY) == 5000
    assert warmup.daily_cap(plan(ceiling=None), 400 * DAY) > 10**12  # no ceiling: keeps growing
    assert warmup.daily_cap(plan(), 9 * DAY) == 1000  # a clock before the start: day 0


@given(st.integers(0, 10**7), st.integers(1, 64))
def test_partition_quotas_add_up_to_the_cap(cap, partitions):
    shares = [warmup.partition_quota(cap, partitions, p) for p in range(partitions)]
    assert sum(shares) == cap and max(shares) - min(shares) <= 1


def test_next_day_and_cli_plans():
    assert warmup.ms_until_next_day(3 * DAY + 1000) == DAY - 1000
    name, parsed = warmup.parse_plan("pool-a=5000:1.5:100000", 7)
    assert name == "pool-a" and parsed == {"warmup_start_ms": 7, "initial_daily_cap": 5000,
                                           "growth": 1.5, "max_daily_cap": 100000}
    assert warmup.parse_plan("b=10", 0)[1]["growth"] == 1.5
    for bad in ("nope", "a=x", "=5", "a=5:0.5", "a=10:2:5", "a=1:2:3:4"):
        with pytest.raises(ValueError):
            warmup.parse_plan(bad, 0)
