"""A committed offset of 0 is sought too (aiokafka skips it, and a fan-out order fetched in a
rebalance's window and lost there was then never fetched again: a campaign stalled)."""

from __future__ import annotations

import asyncio
from typing import Any

from streams.runtime.committed_seek import seek_to_committed


class Consumer:
    """Records seeks; its ``seek_to_committed`` behaves like aiokafka's (skips offset 0)."""

    def __init__(self, committed: dict[str, int | None]) -> None:
        self.committed = committed
        self.seeks: list[tuple[str, int]] = []

    async def seek_to_committed(self) -> dict[str, Any]:
        for tp, offset in self.committed.items():
            if offset and offset > 0:
                self.seeks.append((tp, offset))
        return dict(self.committed)

    def seek(self, tp: str, offset: int) -> None:
        self.seeks.append((tp, offset))


def test_partitions_committed_at_zero_are_sought_as_well() -> None:
    consumer = Consumer({"fanout-0": 0, "fanout-1": 7, "fired-0": None})
    committed = asyncio.run(seek_to_committed(consumer))
    assert sorted(consumer.seeks) == [("fanout-0", 0), ("fanout-1", 7)]
    assert committed == {"fanout-0": 0, "fanout-1": 7, "fired-0": None}


def test_records_fetched_for_a_partition_not_active_yet_are_fetched_again_from_the_first():
    from collections import namedtuple

    from streams.runtime.committed_seek import dropped_starts

    tp = namedtuple("TP", "topic partition")
    record = namedtuple("Record", "offset")
    fired2, fired5, changelog = tp("cronstream.fired", 2), tp("cronstream.fired", 5), tp(
        "cronstream-fires-done-changelog", 2)
    records = {fired2: [record(864), record(865)], fired5: [record(10)],
               changelog: [record(3)], tp("cronstream.fired", 6): []}
    acknowledged = {"cronstream.fired"}.__contains__
    # partition 2 is still recovering (not active): its records would be dropped
    assert dropped_starts(records, {fired5}, set(), acknowledged) == {fired2: 864}
    assert dropped_starts(records, {fired5}, {fired2}, acknowledged) == {}  # buffered: kept
    assert dropped_starts(records, None, set(), acknowledged) == {}  # a client-only consumer
    assert dropped_starts(records, {fired2, fired5}, set(), acknowledged) == {}
