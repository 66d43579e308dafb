"""The opt-out barrier: once the API acknowledges an opt-out, no send to that address starts.

Opt-outs go to ``cronstream.suppressions``, partitioned like the recipients, and the fan-out's
``apply_suppressions`` agent puts them in the co-partitioned ``suppressed`` table. Before a chunk
is sent, its walker waits here until the table holds every suppression of its partition written
up to a moment after the chunk got here: that moment is the linearization point.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Executor

from streams.runtime.admin import committed_offsets, end_offsets
from streams.runtime.outage_log import OutageLog
from streams.runtime.shared_round import SharedRound
from streams.topology import APP_ID, SUPPRESSIONS

log = logging.getLogger(__name__)

ENDS_MIN_TIMEOUT_S = 1.0  # next_ends_timeout_s: a healthy ListOffsets answers in milliseconds
ENDS_MAX_TIMEOUT_S = 8.0
ENDS_HEADROOM = 3  # a round's timeout: this many times the last answered round's duration
ENDS_RETRY_S = 0.2


def next_ends_timeout_s(timeout_s: float, answered_in_s: float | None) -> float:
    """The next round's timeout for the suppressions' ends, after a round given ``timeout_s``
    that answered in ``answered_in_s`` seconds (None: it failed).

    Why short: a round asked of a client whose metadata still names a node that is shutting down
    waits out its whole timeout, and nothing is sent meanwhile. With a fixed 3 s, a rolling
    restart's stuck round held sending 3.2 s, while the round after it, on a fresh client,
    answered at once (docs/testing.md, "The last seconds of a kill"). Why it doubles after a
    failure: on a cluster slower than the timeout every round would fail and sending never
    resume. Why it follows the last answer, not a count of failures: a slow but healthy cluster
    settles at a timeout its rounds meet, instead of failing every other round (and each failure
    counts towards the shared AdminClient's replacement, ``admin.STUCK_AFTER``)."""
    if answered_in_s is None:
        return min(timeout_s * 2, ENDS_MAX_TIMEOUT_S)
    return min(max(answered_in_s * ENDS_HEADROOM, ENDS_MIN_TIMEOUT_S), ENDS_MAX_TIMEOUT_S)


class OptOutBarrier:
    def __init__(self, bootstrap: str, partitions: int, pool: Executor) -> None:
        self.bootstrap = bootstrap
        self.partitions = partitions  # the suppressions topic's (Settings.partitions)
        self._pool = pool  # the walkers' threads: a committed-offset lookup blocks
        self.applied: dict[int, int] = {}  # suppressions partition -> last applied offset
        self._ends = SharedRound(self._suppression_ends)
        self._outage = OutageLog(log, "suppressions' ends unknown")
        # the next round's (next_ends_timeout_s); rounds run one at a time (SharedRound)
        self._timeout_s = ENDS_MIN_TIMEOUT_S

    def _suppression_ends(self) -> dict[tuple[str, int], int]:
        """Where every suppressions partition ends: one ListOffsets for all of them."""
        timeout_s, started = self._timeout_s, time.monotonic()
        try:
            ends = end_offsets(self.bootstrap,
                               [(SUPPRESSIONS.name, p) for p in range(self.partitions)],
                               timeout_s)
        except Exception:
            self._timeout_s = next_ends_timeout_s(timeout_s, None)
            raise
        self._timeout_s = next_ends_timeout_s(timeout_s, time.monotonic() - started)
        return ends

    async def _ends_now(self) -> dict[tuple[str, int], int]:
        """The ends from a round begun after this call; a failed round (a leader moving, a
        client's stale metadata) is asked again, never raised: a raise failed the whole walk,
        and its chunks in flight past their intents were resolved ``unknown`` (a rolling
        restart, tests/chaos/test_cluster_faults.py). Nothing has been sent while it waits."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                ends = await self._ends.fresh()
            except Exception as exc:  # noqa: BLE001 - waited out; one warning each 30 s for all
                self._outage.failed(loop.time(), f"{exc}; walkers wait and ask again")
                await asyncio.sleep(ENDS_RETRY_S)
                continue
            self._outage.answered(loop.time())
            return ends

    def _committed(self, partition: int) -> int | None:
        return committed_offsets(self.bootstrap, APP_ID).get((SUPPRESSIONS.name, partition))

    async def caught_up(self, partition: int) -> None:
        """Wait until every suppression written to ``partition`` so far is in the table. The
        partition's end is read from a round begun after this call (that is the linearization
        point: what the API has acknowledged), shared with every chunk waiting at the same time;
        the group's commit only when the table is behind it."""
        loop = asyncio.get_running_loop()
        high = (await self._ends_now())[(SUPPRESSIONS.name, partition)]
        waited = 0
        while self.applied.get(partition, -1) < high - 1:
            if waited % 100 == 0:  # at once, then each second: another process may have
                committed = await loop.run_in_executor(  # applied them before a restart
                    self._pool, self._committed, partition)
                # committed offsets were applied before a restart (the table's changelog has them)
                self.applied[partition] = max(self.applied.get(partition, -1),
                                              (committed or 0) - 1)
                if self.applied[partition] >= high - 1:
                    return
            await asyncio.sleep(0.01)
            waited += 1
            if waited % 3000 == 0:  # every 30 s: a barrier that never lifts stalls the campaign
                log.warning("suppressions partition %d: applied through %d, end %d; walkers of "
                            "this partition have waited %d s", partition,
                            self.applied.get(partition, -1), high, waited // 100)
