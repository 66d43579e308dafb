"""The promotion's steps in order (ops/region.py), against an authority stand-in that applies
``streams.runtime.region``'s transitions to a row in memory on a clock the test moves."""

from __future__ import annotations

import pytest

from ops import region as ops_region
from streams.runtime import region
from streams.runtime.region import Authority


class Memory:
    """``Store``'s calls the promotion makes, on one row in memory."""

    def __init__(self, row: Authority, log: list[str]) -> None:
        self.row, self.log, self.now = row, log, 0

    def read(self) -> Authority:
        return self.row

    def now_ms(self) -> int:
        return self.now

    def begin_handover(self, epoch: int) -> Authority:
        self.log.append("drain")
        self.row = region.begin_handover(self.row, epoch, self.now)
        return self.row

    def promote(self, to: str, epoch: int, *, planned: bool) -> region.Promotion:
        self.log.append(f"promote {to}")
        done = region.promote(self.row, to, epoch, self.now, planned=planned)
        self.row = done.row
        return done


def run(store: Memory, planned: bool, lag: list[int], renewing: bool = False,
        wait_s: float = 60) -> tuple[region.Promotion, list[str]]:
    log = store.log
    clock = [0.0]

    def sleep(s: float) -> None:  # the authority's clock moves with the wait
        clock[0] += s
        store.now += int(s * 1000)
        if renewing:
            store.row = region.renew(store.row, "a", store.row.epoch, store.now, 10_000)

    site = ops_region.Site(stop_replication=lambda: log.append("stop replication"),
                           replication_lag=lambda: lag.pop(0) if lag else 0,
                           rewind_marks=lambda name: log.append(f"rewind {name}"),
                           start_region=lambda name: log.append(f"start {name}"))
    done, _ = ops_region.promote(store, "b", planned=planned, site=site, say=lambda _: None,
                                 wait_s=wait_s, sleep=sleep, monotonic=lambda: clock[0])
    return done, log


def test_unplanned_stops_replication_first_then_waits_out_the_lease_then_promotes():
    store = Memory(Authority(epoch=1, active="a", lease_until_ms=3_000), [])
    done, log = run(store, planned=False, lag=[])
    assert log == ["stop replication", "promote b", "rewind b", "start b"]
    assert store.now > 3_000, "promoted while the old lease held"
    assert (done.row.epoch, done.row.active, done.row.horizon_ms) == (2, "b", 3_000)


def test_planned_drains_waits_for_the_lease_and_the_copy_then_stops_replication():
    store = Memory(Authority(epoch=1, active="a", lease_until_ms=2_000), [])
    done, log = run(store, planned=True, lag=[5, 3, 0])
    assert log == ["drain", "stop replication", "promote b", "start b"]
    assert done.row.horizon_ms == 0 and done.planned


def test_an_active_region_still_renewing_is_not_deposed_unplanned():
    store = Memory(Authority(epoch=1, active="a", lease_until_ms=10_000), [])
    with pytest.raises(ops_region.PromotionFailed, match="still renews"):
        run(store, planned=False, lag=[], renewing=True, wait_s=30)
    assert store.row.epoch == 1 and "promote b" not in store.log


def test_a_promotions_mark_replaces_the_partitions_mark_and_the_schedulers_only_raise_it():
    from streams.scheduling.progress import REWOUND_BY, next_mark

    def mark(ms: int, worker: str = "worker-1") -> dict:
        return {"partition": 0, "fired_through_ms": ms, "epoch": 3, "worker": worker}

    assert next_mark(None, mark(50)) == 50
    assert next_mark(100, mark(90)) == 100, "an older owner's late mark does not move it back"
    assert next_mark(100, mark(40, REWOUND_BY)) == 40
    assert next_mark(40, mark(60)) == 60
