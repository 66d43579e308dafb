"""A worker's hold on its region's lease and its chunk reservations, against an authority
stand-in (streams/runtime/authority.py ``RegionLease``, streams/campaigns/reservations.py)."""

from __future__ import annotations

import asyncio

import pytest

from streams.campaigns.reservations import Reservations
from streams.runtime.authority import LeaseLost, RegionLease
from streams.runtime.region import Authority, Refused
from tests.unit.fakes import Lease


class Authority1:
    """The authority's answers, as the test sets them: ``row`` granted, or ``refusal``."""

    def __init__(self) -> None:
        self.row: Authority | None = Authority(epoch=1, active="a", lease_until_ms=0)
        self.down = False
        self.reserved: list[tuple[str, int, int, int]] = []
        self.refuse_reservations = False
        self.inherited_hwm: dict[int, int] = {}

    def renew(self, name: str, epoch: int | None, lease_ms: int) -> Authority:
        if self.down:
            raise OSError("connection refused")
        assert self.row is not None
        if self.row.active != name or (epoch is not None and epoch != self.row.epoch):
            raise Refused(f"region {self.row.active} is active under epoch {self.row.epoch}",
                          self.row)
        return self.row

    def reserve(self, name: str, epoch: int, campaign_id: str, part: int, up_to: int) -> int:
        if self.refuse_reservations:
            raise Refused("the lease has ended", self.row)
        self.reserved.append((campaign_id, part, up_to, epoch))
        return up_to

    def inherited(self, campaign_id: str) -> dict[int, int]:
        return dict(self.inherited_hwm)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def lease_of(authority: Authority1, clock: Clock) -> RegionLease:
    return RegionLease(authority, "a", lease_s=10, margin_s=2, renew_s=2,  # type: ignore[arg-type]
                       monotonic=clock)


def test_a_renewal_lets_the_worker_send_until_its_ask_plus_lease_less_margin():
    authority, clock = Authority1(), Clock()
    lease = lease_of(authority, clock)
    assert lease.holds() is None, "nothing before the first grant"
    lease.renew_once()  # asked at 100
    clock.now = 107.999
    assert lease.holds() == 1 and lease.check() == 1
    clock.now = 108.0  # 100 + 10 - 2: ends the margin before the authority's lease
    assert lease.holds() is None
    with pytest.raises(LeaseLost):
        lease.check()


def test_an_unreachable_authority_lets_the_lease_run_out_and_a_refusal_ends_it_at_once():
    authority, clock = Authority1(), Clock()
    lease = lease_of(authority, clock)
    lease.renew_once()
    authority.down = True
    clock.now = 104.0
    lease.renew_once()  # not renewed: the grant of 100 still holds until 108
    assert lease.holds() == 1
    clock.now = 108.0
    assert lease.holds() is None
    authority.down = False
    lease.renew_once()  # asked at 108: holds again until 116
    clock.now = 110.0
    assert lease.holds() == 1
    authority.row = Authority(epoch=2, active="b", lease_until_ms=0)  # promoted elsewhere
    lease.renew_once()
    assert lease.holds() is None and lease.deposed, "told the epoch moved on: stop now"
    authority.row = Authority(epoch=3, active="a", lease_until_ms=0)  # and back to a
    lease.renew_once()
    assert lease.holds() is None, "a deposed worker never sends again: it must be restarted"


def test_a_worker_of_the_standby_waits_and_takes_the_epoch_its_region_is_promoted_to():
    authority, clock = Authority1(), Clock()
    authority.row = Authority(epoch=1, active="b", lease_until_ms=0)
    lease = lease_of(authority, clock)
    lease.renew_once()
    assert lease.holds() is None and not lease.deposed
    authority.row = Authority(epoch=2, active="a", lease_until_ms=0, horizon_ms=5)
    lease.renew_once()
    assert lease.holds() == 2 and lease.horizon_ms() == 5


def test_reservations_reach_ahead_and_the_authority_sees_one_write_per_half_a_reservation():
    authority = Authority1()
    reservations = Reservations(authority, Lease(epoch=1), 8, chunks=8)  # type: ignore[arg-type]
    span = reservations.span

    async def main() -> None:
        for seq in range(1, 4 * span + 1):
            await reservations.cover("c1", 0, seq, 1)
            assert reservations.hwm[("c1", 0)] >= seq, "a chunk began outside its reservation"
        await asyncio.gather(*list(reservations._extending.values()))

    asyncio.run(main())
    asked = [up_to for _, _, up_to, _ in authority.reserved]
    assert asked[0] == 1 + span
    assert len(asked) <= 4 * 2 + 1, f"{len(asked)} writes for 4 reservations' worth of chunks"
    assert max(asked) <= 4 * span + span, "reserved further ahead than a reservation"


def test_a_refused_reservation_is_a_lost_lease_and_inherited_bounds_are_read_under_the_lease():
    authority = Authority1()
    authority.refuse_reservations = True
    authority.inherited_hwm = {3: 40}
    lease = Lease(epoch=None)
    reservations = Reservations(authority, lease, 8)  # type: ignore[arg-type]

    async def main() -> dict[int, int]:
        with pytest.raises(LeaseLost, match="refused"):
            await reservations.cover("c1", 0, 1, 1)
        reading = asyncio.ensure_future(reservations.inherited("c1"))
        for _ in range(50):
            await asyncio.sleep(0)
        assert not reading.done(), "read before this region holds a lease"
        lease.grant(2)
        return await reading

    assert asyncio.run(main()) == {3: 40}
