"""Due indexes of standby partitions, kept warm so a takeover fires without rebuilding.

A worker that takes over a jobs partition must know every job's next slot before it can fire
any. Rebuilding that from the table is one decode and one next-slot search per job: with a
million jobs, half of them moving, ≈ 20 s after the session timeout had already passed. With
``table_standby_replicas`` each worker holds the other workers' partitions as standbys
(RocksDB kept current from their changelogs); ``WarmIndex`` keeps a due index of such a
partition current as well, so at a takeover the index is adopted as it stands.

A warm index is filled two ways: from the changelog batches faust applies (``streams.runtime.guarded_table``
calls back after each), and by a *scan* of the partition's RocksDB for what was there before the
partition became a standby (a restarted worker's disk, a partition this worker once held). The
scan reads in chunks, each from a fresh iterator at the key where the last one stopped: an
iterator is a snapshot, so one iterator held across chunks could hand back a value a later
batch had already replaced or deleted. A chunk that re-reads a key a batch has indexed indexes
the same value again, which changes nothing.

Entries of a warm index are computed *live* (from the job's own update time, as a job record
arriving now), because a standby does not know which slots the owner has decided. The owner's
fired-through mark says that: at adoption, entries at or before the mark are indexed again from
the mark (``stale``); entries after it are what a rebuild would compute (no slot of the job lies
between its update and that entry). An active partition's index revoked from this worker is kept
warm too (``DueIndex.detach`` drops its preparations: whether a slot was already done is only
known to the owner of the moment).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from streams.scheduling.due_index import DueIndex

# what one scan step reads: ≈ 35 µs a job, so a step holds the event loop for ≈ 35 ms
SCAN_CHUNK = 1_000

Items = Callable[[bytes | None], Iterable[tuple[bytes, bytes]]]  # key-ordered, from a key on


@dataclass(slots=True)
class WarmIndex:
    index: DueIndex = field(default_factory=DueIndex)
    scan_from: bytes | None = b""  # where the scan resumes; None once the RocksDB is all read

    @property
    def complete(self) -> bool:
        return self.scan_from is None

    def scan(self, items: Items, index_one: Callable[[DueIndex, bytes], None],
             limit: int | None = SCAN_CHUNK) -> int:
        """Index up to ``limit`` (None: all remaining) values from where the scan stopped;
        returns how many were indexed."""
        if self.scan_from is None:
            return 0
        count = 0
        for key, raw in items(self.scan_from or None):
            if limit is not None and count >= limit:
                self.scan_from = key
                return count
            index_one(self.index, raw)
            count += 1
        self.scan_from = None
        return count

    def stale(self, mark_ms: int) -> list[str]:
        """Jobs whose entry is at or before the owner's fired-through mark: to index again."""
        return self.index.slots_through(mark_ms)
