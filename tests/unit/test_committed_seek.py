"""A committed offset of 0 is sought too (aiokafka skips it, and a fan-out order fetched in a
rebalance's window and lost there was then never fetched again: a campaign stalled)."""

from __future__ import annotations

import asyncio
from typing import Any

from streams.committed_seek import seek_to_committed


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
