"""Which region may send now: the authority's rules, the lease's arithmetic and the bounds on what
a deposed region may have done unseen, as pure functions (docs/regions.md).

The authority is one row (``Authority``) in a store both regions reach (the PostgreSQL of record:
``streams.runtime.authority``). Every change to it is one of the transitions below, computed
from the row as read under its lock and written back in the same transaction: a compare-and-set.
A transition asked against a row that moved on raises ``Refused`` with the row as it is, so the
caller learns the current epoch. The epoch is the fencing token: strictly increasing, one per
promotion, carried by every send (``EPOCH_TAG``, ``EPOCH_HEADER``).

Only the authority's clock names instants (it grants leases and judges their expiry); a worker
measures durations on its monotonic clock (``LeaseClock``), so the regions' wall clocks may
disagree by any amount. The margin covers a worker's clock running slow against the server's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# the SES message tag and the webhook header every send carries: the epoch it was sent under
EPOCH_TAG = "cronstream-epoch"
EPOCH_HEADER = "X-Cronstream-Region-Epoch"

LEASE_S = 10.0  # CRONSTREAM_REGION_LEASE_S: how long a renewal lets a region send
RENEW_S = 2.0  # CRONSTREAM_REGION_RENEW_S: how often each worker renews
MARGIN_S = 2.0  # CRONSTREAM_REGION_MARGIN_S: a worker stops this long before its lease ends
# the walker's reservation: this many of its partition's chunks past the one that asked, extended
# once fewer than half are left (docs/regions.md, "Campaign chunks: reservations")
RESERVE_CHUNKS = 8
# an unplanned promotion moves each partition's fired-through mark back to before the last
# fired record that crossed, less this: marks and fired records replicate in separate streams
MARK_REWIND_S = 60


# a scheduler's group generations below this: a rebalance a minute for almost two years
GENERATIONS = 1_000_000


def fence_epoch(region_epoch: int, generation: int) -> int:
    """The epoch a scheduler writes on its fired records and marks (the executor's zombie fence,
    ``streams.runtime.fencing``, drops an older one after a newer one): its region's epoch above
    its consumer group's generation. The promoted region's group starts its generations afresh
    while its topics hold the deposed region's records, copied by MirrorMaker with their
    higher generations; without the region's epoch above, every slot the promoted region fired
    was dropped as a zombie's (the two-region test's first run). Within a region the
    generation orders them as before; in one region (epoch 0) it is the generation itself."""
    return region_epoch * GENERATIONS + min(generation, GENERATIONS - 1)


class Refused(Exception):
    """A transition the row does not allow: ``reason`` says why, ``row`` is the row as it is."""

    def __init__(self, reason: str, row: Authority | None) -> None:
        super().__init__(reason)
        self.reason, self.row = reason, row


@dataclass(frozen=True)
class Authority:
    """The authority's row: which region is active under which epoch, and until when it may send."""

    epoch: int
    active: str
    lease_until_ms: int  # the authority's clock; 0: not granted under this epoch yet
    draining: bool = False  # a planned promotion began: the active region stops, renews no more
    # the latest lease end of a region deposed without a hand-over: a reminder asked before it
    # and not replicated as done may have been sent there (``reminder_inherited``)
    horizon_ms: int = 0
    changed_ms: int = 0  # when the epoch or the drain last changed (the authority's clock)


@dataclass(frozen=True)
class Promotion:
    """What a promotion did: the row after it, and whether it inherits the deposed region's
    reservations and lease (unplanned) or found its state handed over (planned)."""

    row: Authority
    deposed: str
    planned: bool


def first(region: str, now_ms: int) -> Authority:
    """The row of a new deployment: ``region`` active under epoch 1, no lease granted yet."""
    return Authority(epoch=1, active=region, lease_until_ms=0, changed_ms=now_ms)


def renew(row: Authority | None, region: str, epoch: int | None, now_ms: int,
          lease_ms: int) -> Authority:
    """Extend the lease of ``region`` under ``epoch`` (None: a worker that holds none yet, which
    takes the current epoch if its region is the active one). Never shortens a lease another
    worker of the region got."""
    if row is None:
        raise Refused("the authority has no row: the deployment's regions are not set up", row)
    if row.active != region:
        raise Refused(f"region {row.active} is active under epoch {row.epoch}, not {region}", row)
    if epoch is not None and epoch != row.epoch:
        raise Refused(f"epoch {epoch} was deposed: the current epoch is {row.epoch}", row)
    if row.draining:
        raise Refused(f"region {region} is draining for a planned promotion (epoch {row.epoch})",
                      row)
    return replace(row, lease_until_ms=max(row.lease_until_ms, now_ms + lease_ms))


def begin_handover(row: Authority | None, epoch: int, now_ms: int) -> Authority:
    """A planned promotion's first step: the active region is told to stop; its renewals are
    refused from now on, so its lease ends within ``LEASE_S``."""
    current = _current(row, epoch)
    return replace(current, draining=True, changed_ms=now_ms)


def promote(row: Authority | None, to: str, epoch: int, now_ms: int, *,
            planned: bool) -> Promotion:
    """Make ``to`` active under a new epoch, deposing ``epoch`` (the one the operator saw).

    Both kinds wait until the active region's lease has ended on the authority's clock: the
    deposed region's last send then started at least the margin before the new region's first.
    A planned one also needs the drain begun (``begin_handover``: the caller has waited for the
    standby's copy to catch up); an unplanned one records the deposed lease's end as the
    reminders' horizon (its reservations are inherited by the store, in the same transaction)."""
    current = _current(row, epoch)
    if to == current.active:
        raise Refused(f"region {to} is already active under epoch {current.epoch}", current)
    if planned and not current.draining:
        raise Refused("a planned promotion drains the active region first (begin_handover)",
                      current)
    if now_ms <= current.lease_until_ms:
        raise Refused(f"region {current.active} holds its lease for another "
                      f"{current.lease_until_ms - now_ms} ms (authority's clock): it is still "
                      "renewing, or its lease has not run out yet", current)
    horizon = current.horizon_ms if planned else max(current.horizon_ms, current.lease_until_ms)
    after = Authority(epoch=current.epoch + 1, active=to, lease_until_ms=0, draining=False,
                      horizon_ms=horizon, changed_ms=now_ms)
    return Promotion(after, current.active, planned)


def reservable(row: Authority | None, region: str, epoch: int, now_ms: int) -> Authority:
    """A reservation may be taken only by the active region under the current epoch while its
    lease holds on the authority's clock (checked under the row's lock, so a promotion waits
    for it and then sees it)."""
    current = _current(row, epoch)
    if current.active != region or current.draining:
        raise Refused(f"region {region} may not reserve under epoch {epoch}: "
                      f"{'draining' if current.draining else f'{current.active} is active'}",
                      current)
    if now_ms >= current.lease_until_ms:
        raise Refused(f"region {region}'s lease under epoch {epoch} has ended", current)
    return current


def _current(row: Authority | None, epoch: int) -> Authority:
    if row is None:
        raise Refused("the authority has no row: the deployment's regions are not set up", row)
    if row.epoch != epoch:
        raise Refused(f"epoch {epoch} was deposed: the current epoch is {row.epoch}", row)
    return row


# -- the worker's side of the lease ----------------------------------------------------------------
@dataclass
class LeaseClock:
    """A worker's lease on its own monotonic clock. A renewal asked at ``asked_at`` and granted
    lets the worker send until ``asked_at + lease − margin``: the authority granted from a later
    instant, so this ends at least the margin before the authority's ``lease_until_ms``, with the
    worker's clock up to ``margin / lease`` slow (docs/regions.md, "The lease")."""

    lease_s: float = LEASE_S
    margin_s: float = MARGIN_S
    epoch: int | None = None
    horizon_ms: int = 0
    deadline: float = 0.0  # monotonic; nothing may start at or after it

    def granted(self, asked_at: float, row: Authority) -> None:
        self.renewed(asked_at, row.epoch, row.horizon_ms)

    def renewed(self, asked_at: float, epoch: int, horizon_ms: int = 0) -> None:
        """Granted for ``epoch`` from a moment after ``asked_at``."""
        self.epoch, self.horizon_ms = epoch, horizon_ms
        self.deadline = max(self.deadline, asked_at + self.lease_s - self.margin_s)

    def lost(self) -> None:
        """Told the epoch moved on or the region drains: stop at once, not at the deadline."""
        self.deadline = 0.0

    def holds(self, now: float) -> int | None:
        """The epoch a send may start under now, or None."""
        return self.epoch if now < self.deadline else None


# -- what a deposed region may have done, unseen -------------------------------------------------
def reservation_needed(seq: int, hwm: int | None, span: int) -> int | None:
    """The ``hwm_seq`` to reserve before chunk ``seq`` may begin, or None when the reservation
    covers it with more than half its span left. ``span`` is ``RESERVE_CHUNKS`` of one
    partition's chunks in seq numbers (an upload's chunks spread over the partitions)."""
    if hwm is not None and seq + span // 2 <= hwm:
        return None
    return seq + span


def reservation_covers(seq: int, hwm: int | None) -> bool:
    """Whether chunk ``seq`` may begin under the reservation (``hwm`` reached)."""
    return hwm is not None and seq <= hwm


def chunk_inherited(seq: int, inherited_hwm: int | None) -> bool:
    """A chunk a deposed region had reserved: not replicated as done, it may have been sent
    there, so it is ``unknown`` here, never sent (docs/regions.md, the table)."""
    return inherited_hwm is not None and seq <= inherited_hwm


def reminder_inherited(asked_ms: int, horizon_ms: int) -> bool:
    """A reminder asked before a deposed region's lease ended: not replicated as done, it may
    have been sent there."""
    return horizon_ms > 0 and asked_ms <= horizon_ms


def rewound_mark(mark_ms: int, last_fired_ms: int | None, rewind_s: int = MARK_REWIND_S) -> int:
    """A partition's fired-through mark in the promoted region's copy: no later than the last
    fired record that crossed, less ``rewind_s``, since the mark may have crossed before the
    records it vouches for. A partition with no fired record in the copy keeps its mark: it
    fired nothing the copy could have missed the records of, or it lost its whole history, which
    no rewind short of the beginning would repair."""
    if last_fired_ms is None:
        return mark_ms
    return max(0, min(mark_ms, last_fired_ms - rewind_s * 1000))
