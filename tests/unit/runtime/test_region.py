"""The authority's rules and the lease's arithmetic (streams/runtime/region.py, docs/regions.md)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.runtime import region
from streams.runtime.region import Authority, LeaseClock, Refused

LEASE_MS = 10_000


def active(epoch: int = 1, until: int = 0, **kw) -> Authority:
    return Authority(epoch=epoch, active="a", lease_until_ms=until, **kw)


def test_renewal_extends_the_active_regions_lease_and_never_shortens_it():
    row = region.renew(active(), "a", 1, now_ms=1_000, lease_ms=LEASE_MS)
    assert row.lease_until_ms == 11_000
    # a worker whose renewal was delayed (asked earlier, answered later) cannot shorten another's
    again = region.renew(active(until=15_000), "a", 1, now_ms=2_000, lease_ms=LEASE_MS)
    assert again.lease_until_ms == 15_000
    # a worker that holds nothing yet takes the current epoch
    assert region.renew(active(epoch=4), "a", None, 0, LEASE_MS).epoch == 4


@pytest.mark.parametrize(("row", "who", "epoch", "why"), [
    (active(), "b", None, "region a is active"),
    (active(epoch=2), "a", 1, "epoch 1 was deposed"),
    (active(draining=True), "a", 1, "draining"),
    (None, "a", None, "no row"),
])
def test_a_renewal_is_refused_to_the_wrong_region_a_deposed_epoch_and_a_drain(row, who, epoch, why):
    with pytest.raises(Refused, match=why) as refused:
        region.renew(row, who, epoch, 0, LEASE_MS)
    assert refused.value.row == row  # the caller learns the row as it is


def test_an_unplanned_promotion_waits_for_the_lease_to_end_then_inherits_it():
    row = active(until=20_000, horizon_ms=5_000)
    with pytest.raises(Refused, match="holds its lease"):
        region.promote(row, "b", 1, now_ms=20_000, planned=False)
    done = region.promote(row, "b", 1, now_ms=20_001, planned=False)
    assert done.row == Authority(epoch=2, active="b", lease_until_ms=0, draining=False,
                                 horizon_ms=20_000, changed_ms=20_001)
    assert (done.deposed, done.planned) == ("a", False)
    # the deposed region's renewals are refused from then on, whatever epoch they name
    with pytest.raises(Refused, match="region b is active"):
        region.renew(done.row, "a", 1, 20_002, LEASE_MS)
    with pytest.raises(Refused, match="region b is active"):
        region.renew(done.row, "a", None, 20_002, LEASE_MS)


def test_a_promotion_against_a_moved_epoch_or_to_the_active_region_is_refused():
    with pytest.raises(Refused, match="epoch 1 was deposed"):
        region.promote(active(epoch=2), "b", 1, 50_000, planned=False)
    with pytest.raises(Refused, match="already active"):
        region.promote(active(), "a", 1, 50_000, planned=False)


def test_a_planned_promotion_drains_first_and_inherits_nothing():
    row = active(until=20_000, horizon_ms=3_000)
    with pytest.raises(Refused, match="drains the active region first"):
        region.promote(row, "b", 1, 30_000, planned=True)
    draining = region.begin_handover(row, 1, 25_000)
    assert draining.draining and draining.lease_until_ms == 20_000
    with pytest.raises(Refused, match="draining"):
        region.renew(draining, "a", 1, 25_001, LEASE_MS)
    with pytest.raises(Refused, match="holds its lease"):
        region.promote(draining, "b", 1, 20_000, planned=True)
    done = region.promote(draining, "b", 1, 30_000, planned=True)
    assert (done.row.epoch, done.row.active, done.row.draining) == (2, "b", False)
    assert done.row.horizon_ms == 3_000  # an earlier unplanned promotion's horizon is kept


def test_reservations_only_under_the_current_epoch_while_its_lease_holds():
    row = active(until=10_000)
    assert region.reservable(row, "a", 1, 9_999) == row
    for who, epoch, now, why in (("a", 1, 10_000, "lease under epoch 1 has ended"),
                                 ("b", 1, 0, "a is active"), ("a", 0, 0, "deposed")):
        with pytest.raises(Refused, match=why):
            region.reservable(row, who, epoch, now)
    with pytest.raises(Refused, match="draining"):
        region.reservable(active(until=10_000, draining=True), "a", 1, 0)


@given(st.integers(0, 10**6), st.floats(0.1, 100), st.floats(0, 0.5))
def test_the_lease_ends_the_margin_before_the_authoritys_whatever_the_delay(asked_at, delay, slow):
    """The worker asks at ``asked_at``; the authority grants ``delay`` later (its clock), and the
    worker's clock runs up to ``slow`` margins' worth slow over the lease: its last send still
    starts before the authority's lease end."""
    clock = LeaseClock()
    row = Authority(epoch=3, active="a", lease_until_ms=0, horizon_ms=7)
    clock.granted(asked_at, row)
    assert clock.holds(asked_at) == 3 and clock.horizon_ms == 7
    last_start = clock.deadline - 1e-9
    assert clock.holds(last_start) == 3 and clock.holds(clock.deadline) is None
    # authority time of that last start: the worker's elapsed time stretched by its slowness
    rate = 1 + slow * clock.margin_s / clock.lease_s
    authority_lease_end = asked_at + delay + clock.lease_s
    assert asked_at + (last_start - asked_at) * rate < authority_lease_end


def test_a_lease_told_it_is_deposed_stops_at_once_and_a_late_grant_cannot_shorten_it():
    clock = LeaseClock(lease_s=10, margin_s=2)
    clock.granted(100.0, active())
    clock.granted(95.0, active())  # a renewal asked earlier, answered later
    assert clock.deadline == 108.0
    clock.lost()
    assert clock.holds(100.0) is None


def test_a_reservation_is_extended_once_less_than_half_its_span_is_left():
    span = region.RESERVE_CHUNKS * 8
    assert region.reservation_needed(5, None, span) == 5 + span
    assert region.reservation_needed(5, 5 + span, span) is None
    assert region.reservation_needed(5 + span // 2, 5 + span, span) is None
    assert region.reservation_needed(6 + span // 2, 5 + span, span) == 6 + span // 2 + span
    assert region.reservation_covers(7, 7) and not region.reservation_covers(8, 7)
    assert not region.reservation_covers(0, None)


def test_what_a_deposed_region_may_have_sent_is_inherited():
    assert region.chunk_inherited(40, 40) and not region.chunk_inherited(41, 40)
    assert not region.chunk_inherited(1, None)  # no reservation under a deposed epoch
    assert region.reminder_inherited(9_000, 9_000) and not region.reminder_inherited(9_001, 9_000)
    assert not region.reminder_inherited(0, 0)  # no unplanned promotion yet


def test_a_mark_is_rewound_before_the_last_fired_record_that_crossed():
    assert region.rewound_mark(100_000, 90_000, rewind_s=60) == 30_000
    assert region.rewound_mark(20_000, 90_000, rewind_s=60) == 20_000  # already before it
    assert region.rewound_mark(20_000, 10_000, rewind_s=60) == 0
    assert region.rewound_mark(20_000, None) == 20_000
