"""The account rate shared across tenants (streams.campaigns.fair_share and
streams.campaigns.pacing.next_tenant)."""

from __future__ import annotations

import asyncio

import pytest

from streams.campaigns.fair_share import FairGate
from streams.campaigns.pacing import next_tenant
from tests.fake_clock import FakeClock


def fake_timed_gate(account_rate_per_s: float, share: float = 1.0) -> tuple[FairGate, FakeClock]:
    clock = FakeClock()
    return FairGate(account_rate_per_s, share=lambda: share, clock=clock,
                    sleep=clock.async_sleep), clock


def test_rotation_is_round_robin_in_name_order():
    assert next_tenant(["b", "a", "c"], None) == "a"
    assert next_tenant(["b", "a", "c"], "a") == "b"
    assert next_tenant(["b", "a", "c"], "c") == "a"
    assert next_tenant(["a", "c"], "b") == "c"  # b left the queue: its successor is next


def test_a_big_tenant_does_not_take_the_small_tenants_turns():
    async def scenario() -> FairGate:
        gate, _ = fake_timed_gate(account_rate_per_s=20_000)
        big = [gate.acquire("big", 50) for _ in range(60)]  # queued first, and many
        small = [gate.acquire("small", 50) for _ in range(10)]
        await asyncio.gather(*big, *small)
        return gate

    gate = asyncio.run(scenario())
    first_twenty = gate.granted[:20]
    assert first_twenty.count("small") == 10, first_twenty  # alternating while both wait
    assert gate.granted[20:] == ["big"] * 50


def test_the_account_rate_holds_and_scales_with_the_partitions_held():
    async def paced(share: float) -> float:
        """How long 40 sends of 50 (2000 tokens) from 3 tenants took at 4000/s, on the gate's
        clock, which only its own waits move."""
        gate, clock = fake_timed_gate(account_rate_per_s=4000, share=share)
        began = clock()
        await asyncio.gather(*(gate.acquire(f"t{i % 3}", 50) for i in range(40)))
        return clock() - began

    whole, half = asyncio.run(paced(1.0)), asyncio.run(paced(0.5))
    # all partitions held: 4000/s once the initial burst (a tenth of a second's worth) is spent
    assert whole == pytest.approx((2000 - 400) / 4000)
    # half of them: half the account rate, and half the burst
    assert half == pytest.approx((2000 - 200) / 2000)


def test_a_cancelled_waiter_is_skipped():
    async def scenario() -> list[str]:
        gate = FairGate(account_rate_per_s=1000, share=lambda: 1.0)
        waiter = asyncio.ensure_future(gate.acquire("gone", 500))
        await asyncio.sleep(0)
        keep = asyncio.ensure_future(gate.acquire("kept", 50))
        await asyncio.sleep(0)
        waiter.cancel()
        await keep
        return gate.granted

    assert "kept" in asyncio.run(scenario())


def test_tokens_given_back_to_the_account_let_the_next_tenant_go_at_once():
    async def wait_for_next(give_back: int) -> float:
        gate, clock = fake_timed_gate(account_rate_per_s=1000)  # a burst of 100 tokens
        await gate.acquire("a", 100)
        gate.give_back(give_back)  # a's chunk turned out to be all opted-out addresses
        return gate.bucket.wait_s(clock(), 100)

    assert asyncio.run(wait_for_next(100)) == 0.0
    assert asyncio.run(wait_for_next(0)) == pytest.approx(0.1)  # 100 tokens at 1000/s
