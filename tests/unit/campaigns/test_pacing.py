"""The token bucket, each walker's share of a campaign's rate and the Pacer a chunk waits on
(``streams.campaigns.pacing``)."""

import asyncio

import pytest

from streams.campaigns.pacing import Pacer, Turn, Turns, walker_bucket
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


class FakeGate:
    """The account's gate, granting at once: what a Pacer asked of it and got back."""

    def __init__(self) -> None:
        self.acquired: list[tuple[str, int]] = []
        self.returned = 0

    async def acquire(self, tenant: str, n: int) -> None:
        self.acquired.append((tenant, n))

    def give_back(self, n: int) -> None:
        self.returned += n


def fake_pacer(start_s: float = 0.0) -> tuple[Pacer, FakeGate, list[float]]:
    """A Pacer on a fake clock that advances only by its sleeps (loop seconds == wall ms / 1000)."""
    gate, slept = FakeGate(), []

    async def sleep(s: float) -> None:
        slept.append(s)

    pacer = Pacer(gate, clock=lambda: start_s + sum(slept),  # type: ignore[arg-type]
                  now_ms=lambda: int((start_s + sum(slept)) * 1000), sleep=sleep)
    return pacer, gate, slept


def test_a_chunk_waits_for_its_walkers_tokens_then_takes_the_accounts():
    pacer, gate, slept = fake_pacer()
    bucket = TokenBucket(rate_per_s=10, burst=50, tokens=20)
    assert asyncio.run(pacer.pace(bucket, "t1", 50, deadline=60_000))
    assert slept == [pytest.approx(3.0)] and gate.acquired == [("t1", 50)]


def test_a_chunk_the_rate_cannot_pace_before_its_deadline_is_refused_at_once():
    pacer, gate, slept = fake_pacer()
    bucket = TokenBucket(rate_per_s=10, burst=50, tokens=0)
    assert not asyncio.run(pacer.pace(bucket, "t1", 50, deadline=4_000))  # needs 5 s
    assert slept == [] and gate.acquired == [], "it neither waits nor takes the account's rate"


def test_tokens_given_back_go_to_the_walker_and_the_account_and_none_is_nothing():
    pacer, gate, _ = fake_pacer()
    bucket = TokenBucket(rate_per_s=10, burst=50, tokens=0)
    pacer.give_back(bucket, 0)
    pacer.give_back(bucket, -3)  # every address sent, an opt-out lifted meanwhile
    assert bucket.tokens == 0 and gate.returned == 0
    pacer.give_back(bucket, 20)
    assert bucket.tokens == 20 and gate.returned == 20


def paced_order(arrivals: list[int], turns: Turns | None) -> list[int]:
    """The order chunks (numbered as the walker read them) take a bucket that has room for
    every one of them, arriving at the pacer in the order ``arrivals`` (their admission's
    earlier awaits finish in any order)."""
    pacer, _, _ = fake_pacer()
    bucket = TokenBucket(rate_per_s=10, burst=1000, tokens=1000)
    tickets = [turns.take() if turns else None for _ in arrivals]
    paced: list[int] = []

    async def chunk(i: int) -> None:
        for _ in range(arrivals.index(i)):  # a later arrival yields more often first
            await asyncio.sleep(0)
        assert await pacer.pace(bucket, "t1", 50, deadline=60_000, turn=tickets[i])
        paced.append(i)

    async def walk() -> None:
        async with asyncio.TaskGroup() as chunks:
            for i in range(len(arrivals)):
                chunks.create_task(chunk(i))

    asyncio.run(walk())
    return paced


def test_a_walks_chunks_take_its_rate_in_the_order_read_whatever_order_they_arrive():
    arrivals = [3, 0, 4, 1, 2]
    assert paced_order(arrivals, None) == arrivals, "without turns the first to arrive goes"
    assert paced_order(arrivals, Turns()) == [0, 1, 2, 3, 4]


def test_a_turn_given_up_unpaced_lets_the_next_chunk_go_and_twice_is_once():
    async def run() -> list[int]:
        turns, paced = Turns(), []
        first, second, third = turns.take(), turns.take(), turns.take()

        async def wait(turn: Turn) -> None:
            await turn.wait()
            paced.append(turn.ticket)

        waiting = [asyncio.create_task(wait(third)), asyncio.create_task(wait(second))]
        await asyncio.sleep(0)
        assert paced == [], "both wait for the first"
        first.release()  # a chunk already done: it never paced
        first.release()
        await asyncio.sleep(0)
        assert paced == [1], "the second goes, the third still waits for it"
        second.release()
        await asyncio.gather(*waiting)
        return paced

    assert asyncio.run(run()) == [1, 2]
