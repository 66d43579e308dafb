"""Each tenant's request rate (api.rate_limit): one bucket per tenant kept across requests,
re-rated when the tenant's record changes, and no more admitted from many threads at once than
from one. The clock is stepped by the test, never slept on."""

from __future__ import annotations

import sys
import threading

from api.rate_limit import TenantRates
from tests.unit.api.conftest import Clock


def test_requests_over_the_rate_are_refused_until_tokens_come_back():
    clock = Clock()
    rates = TenantRates(clock)
    assert [rates.allow("acme", 5) for _ in range(11)] == [True] * 10 + [False]  # a 2 s burst
    clock.now += 0.2  # one token at 5/s
    assert rates.allow("acme", 5) and not rates.allow("acme", 5)
    assert rates.allow("other", 5), "a tenant's bucket is its own"


def test_a_lowered_rate_holds_from_the_next_request():
    clock = Clock()
    rates = TenantRates(clock)
    assert rates.allow("acme", 100)  # 199 of a 200 burst left
    assert sum(rates.allow("acme", 1) for _ in range(10)) == 2, "capped at the new 2 s burst"
    clock.now += 1.0
    assert sum(rates.allow("acme", 1) for _ in range(10)) == 1


def test_a_raised_rate_refills_at_the_new_rate_from_the_change():
    clock = Clock()
    rates = TenantRates(clock)
    assert sum(rates.allow("acme", 5) for _ in range(10)) == 10
    clock.now += 0.1
    assert not rates.allow("acme", 50), "the time before the change refilled at 5/s: half a token"
    clock.now += 0.1
    assert sum(rates.allow("acme", 50) for _ in range(10)) == 5  # 0.5 + 0.1 s at 50/s


def test_a_rate_below_one_is_one():
    rates = TenantRates(Clock())
    assert sum(rates.allow("acme", 0) for _ in range(5)) == 2


class Ticking(Clock):
    """Moves ``step`` seconds at every reading, so buckets refill between requests."""

    def __init__(self, step: float) -> None:
        super().__init__()
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_threads_asking_at_once_are_admitted_no_more_than_the_rate_allows():
    """A bucket's tokens are read, refilled and written back: without the lock, a thread
    writing back a refill it computed before another thread's take undoes that take, and the
    threads together get more than the burst plus what the elapsed time refilled."""
    clock = Ticking(step=1e-6)
    rates = TenantRates(clock)
    threads, calls, rate = 8, 10_000, 1000
    began = clock.now
    start = threading.Barrier(threads)
    admitted = [0] * threads

    def hammer(i: int) -> None:
        start.wait()
        admitted[i] = sum(rates.allow("acme", rate) for _ in range(calls))

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter will
    try:
        workers = [threading.Thread(target=hammer, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        sys.setswitchinterval(switch)
    allowed = 2 * rate + rate * (clock.now - began)  # the burst, and the refill of the time read
    assert 2 * rate <= sum(admitted) <= allowed, (sum(admitted), allowed)
