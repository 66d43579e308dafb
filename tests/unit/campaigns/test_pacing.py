"""The token bucket and each walker's share of a campaign's rate (``streams.campaigns.pacing``)."""

import pytest

from streams.campaigns.pacing import walker_bucket
from streams.runtime.token_bucket import TokenBucket


def test_token_bucket():
    bucket = TokenBucket(rate_per_s=10, burst=5)
    assert all(bucket.take(0.0) for _ in range(5))
    assert not bucket.take(0.0)
    assert bucket.wait_s(0.0) == pytest.approx(0.1)
    assert bucket.take(0.1) and not bucket.take(0.1)
    assert bucket.take(100.0, 5) and not bucket.take(100.0), "refill is capped at the burst"


def test_a_changed_rate_applies_from_the_change_on():
    bucket = TokenBucket(rate_per_s=10, burst=20)
    assert bucket.take(0.0, 20)
    bucket.set_rate(1.0, rate_per_s=100, burst=200)  # the second before refilled at 10/s
    assert bucket.tokens == 10 and bucket.take(1.1, 20) and not bucket.take(1.1, 1)
    bucket.set_rate(10.0, rate_per_s=1, burst=2)
    assert bucket.tokens == 2, "a lowered burst caps what is there at once"


def sends_per_second(rate: float, partitions: int, seconds: int, chunk: int = 50) -> list[int]:
    """Every walker of a campaign takes a chunk whenever its bucket has one (1 ms steps)."""
    buckets = [walker_bucket(rate, p, partitions, chunk) for p in range(partitions)]
    sent = [0] * seconds
    for step in range(seconds * 1000):
        for bucket in buckets:
            if bucket.take(step / 1000, chunk):
                sent[step // 1000] += chunk
    return sent


def test_walkers_keep_a_low_rate_campaign_under_its_rate_from_the_first_second():
    """50/s over 8 partitions is one 50-recipient chunk per walker every 8 s: with full buckets
    at the start all 8 walkers sent at once (400 in the first second)."""
    sent = sends_per_second(50, 8, 40)
    assert max(sent) <= 50 and sum(sent) >= 50 * 39
    assert sends_per_second(8, 8, 60)[0] <= 50, "one chunk is the least a walker can send"


def test_walkers_reach_a_high_rate_at_once():
    """Full buckets at 8,000/s sent 16,000 in the first second."""
    sent = sends_per_second(8000, 8, 5)
    assert all(8000 - 50 <= s <= 8000 + 50 for s in sent), sent


def test_tokens_given_back_are_there_for_the_next_send_up_to_the_burst():
    bucket = TokenBucket(rate_per_s=10, burst=50, tokens=50)
    assert bucket.take(0.0, 50) and not bucket.take(0.0, 20)
    bucket.give_back(20)  # 20 of the 50 were suppressed: not sent
    assert bucket.take(0.0, 20) and not bucket.take(0.0, 1)
    bucket.give_back(500)
    assert bucket.tokens == 50, "giving back never holds more than a full bucket"
