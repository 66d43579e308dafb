"""The reputation guard without a broker (issue 30, item 3): the sliding window of sends, hard
bounces and complaints, the trip decision, and the guard pausing only the tripping tenant's
running campaigns in the pool, with a reason, a metric and its window emptied. The clock is a
value passed in."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams.campaigns import guard, reputation
from streams.campaigns.reputation import BOUNCE, COMPLAINT, SEND, Thresholds, Window
from streams.runtime import metrics
from streams.runtime.codec import codec
from streams.topology import CAMPAIGNS

HOUR = 3600_000
T0 = 1_700_000_000_000
TH = Thresholds(bounce_rate=0.04, complaint_rate=0.01, min_sends=100, window_ms=24 * HOUR)


def filled(sends: int, bounces: int = 0, complaints: int = 0, at: int = T0) -> Window:
    window = Window()
    for which, n in ((SEND, sends), (BOUNCE, bounces), (COMPLAINT, complaints)):
        for _ in range(n):
            window = reputation.add(window, which, at, at, TH)
    return window


def test_below_the_minimum_sample_nothing_trips_whatever_the_rate():
    assert reputation.trip(filled(99, complaints=50), TH) is None


def test_a_complaint_rate_over_the_threshold_trips_and_names_the_rate():
    crossed = reputation.trip(filled(200, complaints=3), TH)
    assert crossed is not None and crossed.kind == "complaint" and crossed.rate == 0.015
    assert "complaint rate 1.50% (3 of 200 sends in the window) is over 1.00%" in crossed.reason()


def test_a_bounce_rate_over_the_threshold_trips():
    assert reputation.trip(filled(100, bounces=4), TH) is None  # 4 % is not over 4 %
    crossed = reputation.trip(filled(100, bounces=5), TH)
    assert crossed is not None and (crossed.kind, crossed.count, crossed.sends) == ("bounce", 5, 100)


def test_events_older_than_the_window_fall_out():
    window = filled(200, complaints=10)
    later = T0 + 25 * HOUR
    window = reputation.add(window, SEND, later, later, TH)
    assert window.totals() == (1, 0, 0)
    assert reputation.trip(window, TH) is None


def test_the_window_slides_bucket_by_bucket():
    window = filled(100, at=T0)
    window = reputation.add(window, SEND, T0 + 12 * HOUR, T0 + 12 * HOUR, TH)
    assert window.totals()[SEND] == 101
    now = T0 + 24 * HOUR + TH.bucket_ms  # the first bucket is past the window now
    window = reputation.add(window, COMPLAINT, now, now, TH)
    assert window.totals() == (1, 0, 1)


def test_an_event_older_than_the_window_adds_nothing():
    window = reputation.add(Window(), SEND, T0 - 25 * HOUR, T0, TH)
    assert window.totals() == (0, 0, 0)


def test_the_window_round_trips_through_its_table_value():
    window = filled(7, bounces=2, complaints=1)
    assert Window.decode(window.encode()) == window
    assert Window.decode(None) == Window()


def record(kind: str, tenant: str = "acme", pool: str | None = "default", **fields: Any
           ) -> dict[str, Any]:
    return {"tenant": tenant, "email": "a@example.org", "event_type": kind,
            "ses_message_id": "m", "event_ms": T0,
            "configuration_set": f"cronstream-{tenant}-{pool}" if pool else None, **fields}


def test_what_counts():
    assert reputation.counted_as(record("Send"), "ignored") == SEND
    bounce = record("Bounce", bounce_type="Permanent")
    assert reputation.counted_as(bounce, "suppress") == BOUNCE
    assert reputation.counted_as(bounce, "duplicate") is None  # SNS delivering it again
    assert reputation.counted_as(record("Bounce", bounce_type="Transient"), "counted") is None
    assert reputation.counted_as(record("Complaint"), "suppress") == COMPLAINT
    assert reputation.counted_as(record("Delivery"), "ignored") is None


def test_the_pool_is_the_configuration_sets_tail():
    assert reputation.pool_of(record("Send", tenant="a-b", pool="bulk-2")) == "bulk-2"
    assert reputation.pool_of({**record("Send", tenant="a-b"),
                               "configuration_set": "cronstream-a-b_bulk-2"}) == "bulk-2"
    assert reputation.pool_of({**record("Send", tenant="a"),
                               "configuration_set": "cronstream-a-b_bulk-2"}) is None
    assert reputation.pool_of(record("Send", pool=None)) is None
    assert reputation.pool_of({**record("Send"), "configuration_set": "other-set"}) is None


def campaign(cid: str, tenant: str = "acme", status: str = "scheduled", pool: str = "default"
             ) -> dict[str, Any]:
    return {"campaign_id": cid, "tenant": tenant, "status": status, "ip_pool": pool,
            "revision": 3, "updated_ms": 0, "status_reason": None}


def test_only_the_tenants_running_campaigns_in_the_pool_are_paused():
    campaigns = [campaign("a"), campaign("b", status="ready"), campaign("c", tenant="other"),
                 campaign("d", pool="bulk"), campaign("e", status="paused")]
    assert [c["campaign_id"] for c in reputation.to_pause(campaigns, "acme", "default")] == ["a"]
    assert [c["campaign_id"] for c in reputation.to_pause(campaigns, "acme", None)] == ["a", "d"]


class Emitter:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, bytes | None]] = []

    async def send(self, topic, key, value, partition=None, headers=None) -> None:
        self.sent.append((topic.name, key, value))


class Records:
    """The worker's campaigns view."""

    def __init__(self, campaigns: list[dict[str, Any]]) -> None:
        self.by_id = {c["campaign_id"]: c for c in campaigns}

    async def campaigns(self) -> list[dict[str, Any]]:
        return list(self.by_id.values())

    async def written(self, campaign: dict[str, Any]) -> None:
        self.by_id[campaign["campaign_id"]] = campaign


def test_a_second_trip_finds_the_campaign_paused_and_writes_nothing(monkeypatch):
    monkeypatch.setattr(codec(), "encode", lambda name, rec: repr(rec).encode())
    emitter, records = Emitter(), Records([campaign("a")])
    g = guard.Guard(TH, {}, records, emitter, lambda: T0)

    async def trip(partition: int) -> list[dict[str, Any]]:
        for _ in range(100):
            await g.observe(record("Send"), "ignored", partition)
        await g.observe(record("Complaint"), "suppress", partition)  # 1 %: not over
        return await g.observe(record("Complaint"), "suppress", partition)

    assert len(asyncio.run(trip(1))) == 1 and asyncio.run(trip(2)) == []
    assert len(emitter.sent) == 1


def test_the_guard_pauses_with_the_reason_counts_the_metric_and_starts_a_new_window(
        monkeypatch):
    monkeypatch.setattr(codec(), "encode", lambda name, rec: repr(rec).encode())
    table: dict[bytes, bytes] = {}
    emitter = Emitter()
    records = Records([campaign("a"), campaign("c", tenant="other")])
    g = guard.Guard(TH, table, records, emitter, lambda: T0 + 1)
    before = metrics.REPUTATION_PAUSED.labels("acme", "complaint")._value.get()

    async def feed() -> list[list[dict[str, Any]]]:
        results = [await g.observe(record("Send"), "ignored", 5) for _ in range(100)]
        results.append(await g.observe(record("Complaint"), "duplicate", 5))  # not counted
        results.append(await g.observe(record("Complaint"), "suppress", 5))
        results.append(await g.observe(record("Complaint"), "suppress", 5))
        return results

    results = asyncio.run(feed())
    assert all(r == [] for r in results[:-1])
    [paused] = results[-1]
    assert (paused["campaign_id"], paused["status"], paused["revision"]) == ("a", "paused", 4)
    assert paused["status_reason"].startswith("paused by the reputation guard: complaint rate "
                                              "2.00% (2 of 100 sends")
    assert [(t, k) for t, k, _ in emitter.sent] == [(CAMPAIGNS.name, "a")]
    assert records.by_id["a"]["status"] == "paused"  # the view is told at once
    assert metrics.REPUTATION_PAUSED.labels("acme", "complaint")._value.get() == before + 1
    assert Window.decode(table[reputation.row_key("acme", "default", 5)]) == Window()


def test_the_guard_keeps_partitions_and_pools_apart():
    table: dict[bytes, bytes] = {}
    g = guard.Guard(TH, table, Records([]), Emitter(), lambda: T0)
    asyncio.run(g.observe(record("Send"), "ignored", 1))
    asyncio.run(g.observe(record("Send", pool="bulk"), "ignored", 1))
    asyncio.run(g.observe(record("Send"), "ignored", 2))
    assert sorted(table) == [b"acme:bulk@1", b"acme:default@1", b"acme:default@2"]


@pytest.mark.parametrize("name,value", [("CRONSTREAM_GUARD_COMPLAINT_RATE", "2"),
                                        ("CRONSTREAM_GUARD_MIN_SENDS", "0"),
                                        ("CRONSTREAM_GUARD_BOUNCE_RATE", "x")])
def test_bad_settings_are_refused(monkeypatch, name, value):
    from streams.runtime import settings

    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit):
        settings.load().guard_thresholds  # noqa: B018


def test_the_defaults_sit_below_ses_review_levels(monkeypatch):
    from streams.runtime import settings

    for name in ("BOUNCE_RATE", "COMPLAINT_RATE", "MIN_SENDS", "WINDOW_S"):
        monkeypatch.delenv(f"CRONSTREAM_GUARD_{name}", raising=False)
    th = guard.thresholds_of(settings.load().guard_thresholds)
    assert th == Thresholds(0.04, 0.0008, 1000, 86400_000)
