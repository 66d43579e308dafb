"""Each tenant's fires per second (streams.execution.fire_quota) as the run queue applies it
(streams.execution.dispatch): no broker, a clock the test steps."""

from __future__ import annotations

import asyncio
import json

import pytest

from streams.adapters import tenants
from streams.execution.dispatch import RunQueue, Waiting, expiry_reason
from streams.execution.fire_quota import RATE_REFRESH_MS, FireQuota
from streams.execution.targets import TenantRecords
from streams.runtime.codec import SCHEMAS_DIR

NOW = 1_000_000


def slot(name: str, tenant: str, nominal: int = NOW, run_by: int | None = None,
         host: str = "http://h:80") -> Waiting[str]:
    return Waiting(name, tenant, host, nominal, run_by)


def queue_with(limits: dict[str, int], partitions: int = 1, held: int = 1) -> RunQueue[str]:
    quota = FireQuota(lambda t: limits.get(t, tenants.DEFAULT_FIRES_PER_S), partitions)
    quota.held(held)
    return RunQueue(per_host=1000, quota=quota)


def started(queue: RunQueue[str], now: int) -> list[str]:
    """Every slot the queue starts at ``now`` (each run ends at once)."""
    names = []
    while (chosen := queue.take(now)[0]) is not None:
        queue.ended(chosen.host)
        names.append(chosen.item)
    return names


def test_a_tenant_over_its_rate_waits_and_the_others_are_not_held() -> None:
    queue = queue_with({"noisy": 3})
    for i in range(20):
        queue.push(slot(f"noisy-{i}", "noisy"))
        queue.push(slot(f"quiet-{i}", "quiet"))
    first = started(queue, NOW)
    assert [n for n in first if n.startswith("noisy")] == ["noisy-0", "noisy-1", "noisy-2"]
    assert [n for n in first if n.startswith("quiet")] == [f"quiet-{i}" for i in range(20)]
    assert len(queue) == 17, "the noisy tenant's other slots wait: nothing is dropped"
    # the dispatcher is told when to look again: a third of a second at 3 per second
    assert queue.next_token_ms == NOW + 334


def test_tokens_refill_at_the_rate_up_to_one_seconds_burst() -> None:
    queue = queue_with({"t": 4})
    for i in range(40):
        queue.push(slot(f"s{i}", "t"))
    assert len(started(queue, NOW)) == 4, "a second's worth at once"
    assert started(queue, NOW + 100) == []
    assert started(queue, NOW + 250) == ["s4"]
    assert started(queue, NOW + 1250) == ["s5", "s6", "s7", "s8"]
    # ten quiet seconds fill the bucket to one second's worth, no more
    assert len(started(queue, NOW + 11_250)) == 4


def test_an_executor_starts_its_share_of_the_rate_by_the_partitions_it_holds() -> None:
    queue = queue_with({"t": 80}, partitions=8, held=2)  # 80/s across the cluster: 20 here
    for i in range(100):
        queue.push(slot(f"s{i}", "t"))
    assert len(started(queue, NOW)) == 20
    assert len(started(queue, NOW + 500)) == 10
    queue.quota.held(4)  # type: ignore[union-attr] - a rebalance gave it two more
    # re-rated at its next turn: the half second before at the old 20/s, the next at 40/s
    assert len(started(queue, NOW + 1000)) == 10
    assert len(started(queue, NOW + 1500)) == 20
    queue.quota.held(0)  # type: ignore[union-attr] - never a zero rate: one partition's share
    assert len(started(queue, NOW + 2500)) == 10


def test_a_changed_quota_holds_from_the_next_refresh() -> None:
    limits = {"t": 100}
    queue = queue_with(limits)
    for i in range(300):
        queue.push(slot(f"s{i}", "t"))
    assert len(started(queue, NOW)) == 100
    limits["t"] = 2
    assert len(started(queue, NOW + RATE_REFRESH_MS)) == 2, "lowered: capped at the new burst"


def test_a_slot_expired_while_its_tenant_was_held_says_the_quota_and_a_backlogs_does_not() -> None:
    queue = queue_with({"t": 1})
    for i in range(3):
        queue.push(slot(f"s{i}", "t", run_by=NOW + 500))
    assert started(queue, NOW) == ["s0"]
    chosen, expired = queue.take(NOW + 600)
    assert chosen is None and [w.item for w in expired] == ["s1", "s2"], \
        "a held tenant's stale slots expire without waiting for a token"
    assert all(queue.held_by_quota(w) for w in expired)
    reason = expiry_reason(expired[0], NOW + 600, queue.held_by_quota(expired[0]))
    assert reason.startswith("fires-per-second quota: the tenant's max_fires_per_s held its runs")
    assert "max_lateness_s=0" in reason

    other = queue_with({})
    other.push(slot("late", "free", run_by=NOW + 500))
    _, late = other.take(NOW + 600)
    assert not other.held_by_quota(late[0])
    assert expiry_reason(late[0], NOW + 600, False).startswith("run backlog: ")


def test_a_slot_taken_and_not_run_gives_its_token_back() -> None:
    queue = queue_with({"t": 1})
    queue.push(slot("skipped", "t"))
    queue.push(slot("next", "t"))
    chosen, _ = queue.take(NOW)
    assert chosen is not None and chosen.item == "skipped"
    queue.not_run(chosen)  # its job's overlap policy skipped it: no run started
    assert started(queue, NOW) == ["next"]


def test_the_default_is_the_schemas_and_an_unknown_or_unread_tenant_gets_it() -> None:
    schema = json.loads((SCHEMAS_DIR / "tenant.avsc").read_text())
    field = next(f for f in schema["fields"] if f["name"] == "max_fires_per_s")
    assert field["default"] == tenants.DEFAULT_FIRES_PER_S
    assert tenants.new_tenant("acme")[0]["max_fires_per_s"] == tenants.DEFAULT_FIRES_PER_S

    class View:
        def start(self) -> View:
            return self

        def get(self, tenant: str) -> dict | None:
            return {"t5": {"max_fires_per_s": 5}, "old": {}}.get(tenant)

    records = TenantRecords(View)
    assert records.fires_per_s("t5") == tenants.DEFAULT_FIRES_PER_S, "not started: not waited for"

    async def warmed() -> None:
        records.warm()  # as the worker does at its first recovery, before any run
        assert records._warming is not None
        await records._warming

    asyncio.run(warmed())
    assert records.fires_per_s("t5") == 5
    assert records.fires_per_s("old") == tenants.DEFAULT_FIRES_PER_S  # written before the field
    assert records.fires_per_s("nobody") == tenants.DEFAULT_FIRES_PER_S


@pytest.mark.parametrize("value", [0, -5])
def test_a_quota_below_one_is_refused_naming_the_field(value: int) -> None:
    with pytest.raises(ValueError, match="max_fires_per_s: must be at least 1"):
        tenants.new_tenant("acme", max_fires_per_s=value)
    record, _ = tenants.new_tenant("acme")
    with pytest.raises(ValueError, match="max_fires_per_s: must be at least 1"):
        tenants.granted(record, max_fires_per_s=value)
    assert tenants.granted(record, max_fires_per_s=7)["max_fires_per_s"] == 7
