"""A worker's chunk reservations in the active-region authority (docs/regions.md, "Campaign
chunks: reservations").

A walker may write a chunk's intent only once the authority's reservation of its (campaign,
recipient partition) reaches the chunk's seq, taken under the current epoch while the region's
lease holds. A reservation reaches ``RESERVE_CHUNKS`` of the partition's chunks past the one that
asked, and is extended in the background once fewer than half are left, so in a steady send no
chunk waits on the authority, which sees one write per four to eight chunks of a partition. A
region promoted without a hand-over inherits every reservation (``Store.promote``): what a deposed
region may have sent is bounded by them, and ``inherited`` says where they reach.

One region (no authority): every chunk is covered, nothing is inherited.
"""

from __future__ import annotations

import asyncio
import logging

from streams.runtime import region
from streams.runtime.authority import Lease, LeaseLost, Store
from streams.runtime.region import Refused

log = logging.getLogger(__name__)


class Reservations:
    """The reservations this worker's walkers hold, per (campaign, partition): the ``hwm_seq``
    the authority last answered, and the inherited bound of each campaign (read once: it only
    changes at a promotion, which deposes this worker's epoch)."""

    def __init__(self, store: Store | None, lease: Lease, partitions: int,
                 chunks: int = region.RESERVE_CHUNKS) -> None:
        self.store, self.lease = store, lease
        # an upload's chunks are numbered across its partitions: ``chunks`` of one partition
        # span about ``chunks`` times the partition count (``Settings.partitions``) in seq
        self.span = chunks * partitions
        self.hwm: dict[tuple[str, int], int] = {}
        self._inherited: dict[str, dict[int, int]] = {}
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}
        self._extending: dict[tuple[str, int], asyncio.Task[None]] = {}

    async def inherited(self, campaign_id: str) -> dict[int, int]:
        """Per partition, the highest chunk a deposed region may have sent ({} in one region).
        Read once the lease holds: it was granted under an epoch that began after any promotion
        that set it, so the answer is final for as long as this worker sends."""
        if self.store is None:
            return {}
        await self.lease.held()
        if campaign_id not in self._inherited:
            self._inherited[campaign_id] = await asyncio.to_thread(self.store.inherited,
                                                                   campaign_id)
        return self._inherited[campaign_id]

    async def cover(self, campaign_id: str, part: int, seq: int, epoch: int) -> None:
        """Return once chunk ``seq`` may begin under ``epoch``; raises ``LeaseLost`` when the
        authority refuses (the lease ended, or the epoch moved on): nothing may begin."""
        if self.store is None:
            return
        key = (campaign_id, part)
        want = region.reservation_needed(seq, self.hwm.get(key), self.span)
        if want is None:
            return
        if region.reservation_covers(seq, self.hwm.get(key)):
            if key not in self._extending:  # ahead of need: the chunk goes on
                task = asyncio.get_running_loop().create_task(self._extend(key, want, epoch))
                self._extending[key] = task
                task.add_done_callback(lambda _: self._extending.pop(key, None))
            return
        async with self._locks.setdefault(key, asyncio.Lock()):
            if not region.reservation_covers(seq, self.hwm.get(key)):
                await self._reserve(key, want, epoch)

    async def _extend(self, key: tuple[str, int], want: int, epoch: int) -> None:
        try:
            async with self._locks.setdefault(key, asyncio.Lock()):
                await self._reserve(key, want, epoch)
        except Exception:  # noqa: BLE001 - the chunk that needs it asks again, and waits
            log.warning("campaign %s partition %d: reservation to seq %d not extended ahead",
                        *key, want, exc_info=True)

    async def _reserve(self, key: tuple[str, int], want: int, epoch: int) -> None:
        assert self.store is not None
        name = self.lease.name or ""
        try:
            hwm = await asyncio.to_thread(self.store.reserve, name, epoch, key[0], key[1], want)
        except Refused as refused:
            raise LeaseLost(f"campaign {key[0]} partition {key[1]}: reservation to seq {want} "
                            f"refused: {refused.reason}") from refused
        self.hwm[key] = max(hwm, self.hwm.get(key, -1))
