"""Which waiting slot runs next (streams.execution.dispatch): no broker, no clock."""

from __future__ import annotations

import pytest

from streams.execution.dispatch import RunQueue, Waiting, expiry_reason

NOW = 1_000_000


def slot(name: str, tenant: str = "a", host: str = "http://h:80", nominal: int = NOW,
         run_by: int | None = None) -> Waiting[str]:
    return Waiting(name, tenant, host, nominal, run_by)


def drain(queue: RunQueue[str], now: int = NOW) -> list[str]:
    """Take every slot, ending each run at once (hosts always have room)."""
    taken = []
    while True:
        chosen, _ = queue.take(now)
        if chosen is None:
            return taken
        queue.ended(chosen.host)
        taken.append(chosen.item)


def test_a_tenant_with_one_slot_waits_for_one_slot_of_a_tenant_with_thousands() -> None:
    queue: RunQueue[str] = RunQueue(per_host=8)
    for i in range(1000):
        queue.push(slot(f"big-{i}", tenant="big"))
    queue.push(slot("small-0", tenant="small"))
    order = drain(queue)
    assert order.index("small-0") == 1
    assert len(order) == 1001 and len(queue) == 0


def test_tenants_take_turns_in_rounds() -> None:
    queue: RunQueue[str] = RunQueue(per_host=8)
    for i in range(3):
        queue.push(slot(f"a{i}", tenant="a"))
        queue.push(slot(f"b{i}", tenant="b"))
    queue.push(slot("c0", tenant="c"))
    assert drain(queue) == ["a0", "b0", "c0", "a1", "b1", "a2", "b2"]


def test_within_a_tenant_and_a_host_slots_run_in_the_order_they_were_read() -> None:
    queue: RunQueue[str] = RunQueue(per_host=8)
    for i in range(5):
        queue.push(slot(f"s{i}"))
    assert drain(queue) == [f"s{i}" for i in range(5)]


def test_a_host_at_its_limit_is_passed_over_and_the_other_hosts_keep_running() -> None:
    queue: RunQueue[str] = RunQueue(per_host=2)
    for i in range(10):
        queue.push(slot(f"slow-{i}", host="http://slow:80"))
        queue.push(slot(f"fast-{i}", host="http://fast:80"))
    started = []
    while True:  # nothing ends: the slow host's two runs hold, the fast host's end at once
        chosen, _ = queue.take(NOW)
        if chosen is None:
            break
        started.append(chosen.item)
        if chosen.host == "http://fast:80":
            queue.ended(chosen.host)
    assert [s for s in started if s.startswith("slow")] == ["slow-0", "slow-1"]
    assert [s for s in started if s.startswith("fast")] == [f"fast-{i}" for i in range(10)]
    assert queue.running("http://slow:80") == 2 and len(queue) == 8
    queue.ended("http://slow:80")
    chosen, _ = queue.take(NOW)
    assert chosen is not None and chosen.item == "slow-2"


def test_every_host_at_its_limit_takes_nothing_and_loses_nothing() -> None:
    queue: RunQueue[str] = RunQueue(per_host=1)
    queue.push(slot("one"))
    queue.push(slot("two"))
    first, _ = queue.take(NOW)
    assert first is not None
    assert queue.take(NOW) == (None, [])
    assert len(queue) == 1
    queue.ended(first.host)
    assert queue.running(first.host) == 0
    second, _ = queue.take(NOW)
    assert second is not None and second.item == "two"


def test_a_slot_whose_turn_comes_past_its_run_by_is_expired_with_the_reason() -> None:
    queue: RunQueue[str] = RunQueue(per_host=4)
    queue.push(slot("stale", nominal=NOW - 90_000, run_by=NOW - 30_000))
    queue.push(slot("fresh", nominal=NOW - 1_000, run_by=NOW + 59_000))
    queue.push(slot("no-limit", nominal=NOW - 10**9, run_by=None))
    chosen, expired = queue.take(NOW)
    assert chosen is not None and chosen.item == "fresh"
    assert [w.item for w in expired] == ["stale"]
    assert queue.running("http://h:80") == 1, "an expired slot takes no room on its host"
    reason = expiry_reason(expired[0], NOW)
    assert "90000 ms after its nominal time" in reason and "max_lateness_s=60" in reason
    assert drain(queue) == ["no-limit"]


def test_a_slot_due_exactly_at_its_run_by_still_runs() -> None:
    queue: RunQueue[str] = RunQueue(per_host=1)
    queue.push(slot("edge", nominal=NOW - 5_000, run_by=NOW))
    chosen, expired = queue.take(NOW)
    assert chosen is not None and expired == []


def test_only_expired_slots_left_are_all_returned() -> None:
    queue: RunQueue[str] = RunQueue(per_host=1)
    for i in range(3):
        queue.push(slot(f"x{i}", tenant=f"t{i}", nominal=0, run_by=1))
    chosen, expired = queue.take(NOW)
    assert chosen is None and sorted(w.item for w in expired) == ["x0", "x1", "x2"]
    assert len(queue) == 0 and queue.oldest_nominal_ms() is None


def test_the_backlog_age_is_the_oldest_head() -> None:
    queue: RunQueue[str] = RunQueue(per_host=1)
    assert queue.oldest_nominal_ms() is None
    queue.push(slot("a", tenant="a", nominal=NOW - 5))
    queue.push(slot("b", tenant="b", nominal=NOW - 50))
    assert queue.oldest_nominal_ms() == NOW - 50


def test_removing_a_revoked_partitions_slots_keeps_the_rest_in_order() -> None:
    queue: RunQueue[str] = RunQueue(per_host=8)
    for i in range(6):
        queue.push(slot(f"p{i % 2}-{i}", tenant="a" if i < 3 else "b"))
    removed = queue.remove_if(lambda item: item.startswith("p1"))
    assert sorted(w.item for w in removed) == ["p1-1", "p1-3", "p1-5"]
    assert len(queue) == 3
    assert drain(queue) == ["p0-0", "p0-4", "p0-2"]


def test_per_host_must_be_positive() -> None:
    with pytest.raises(ValueError, match="per_host"):
        RunQueue(per_host=0)


def test_expired_slots_are_handed_back_a_bounded_batch_at_a_time():
    queue: RunQueue[str] = RunQueue(per_host=4)
    for i in range(10):
        queue.push(slot(f"old-{i}", tenant=f"t{i % 3}", nominal=0, run_by=1))
    queue.push(slot("fresh", tenant="t9", run_by=NOW + 1))
    batches = []
    while True:
        chosen, expired = queue.take(NOW, max_expired=4)
        batches.append(len(expired))
        if chosen is not None:
            break
    assert max(batches) <= 4 and sum(batches) == 10 and chosen.item == "fresh"
