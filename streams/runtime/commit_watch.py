"""Heal a partition whose commits stopped because records were never handed to its agent.

After a rebalance, a worker that takes a partition over sometimes did not receive the records
from the group's committed offset on: the first record its agent got lay further on. The
failover benchmark caught it (2026-11-23): on ``cronstream.fired`` partition 2 the survivor
started at the committed offset 864 but was handed 941 first. faust then marks 865..940 as a
gap (as it does for a compacted topic) but not 864 itself, and its commit, which only advances
over acknowledged offsets starting at the committed one, never moves again: the partition's
lag grows for ever and every later rebalance re-reads the whole backlog. The cause found —
faust's fetch loop dropping records of a partition not active yet — is fixed where it happens
(``streams.runtime.committed_seek``); this punctuator is the backstop for any other way a record at the
committed offset goes missing.

So every ``WATCH_S`` this punctuator looks at each assigned partition of an acknowledged topic:
when the record at the committed offset is neither acknowledged, nor in flight (delivered to an
agent and not yet acknowledged), nor in a gap faust knows of, while records after it are
acknowledged — twice in a row, at the same committed offset — the partition is sought back to
its committed offset, and the skipped records are delivered again. So is everything after them,
which every agent already takes (the done table and ``streams.execution.arrivals`` for fired slots, the
walkers' keys for fan-out orders, upserts for tables).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any

from streams.runtime import metrics

log = logging.getLogger(__name__)

WATCH_S = 10.0


def skipped(committed: int | None, min_acked: int | None, in_flight: bool, in_gap: bool) -> bool:
    """Whether the record at ``committed`` looks skipped: later records were acknowledged, and
    it is neither acknowledged, in flight, nor a known gap (a compacted-away offset)."""
    if committed is None or min_acked is None or in_flight or in_gap:
        return False
    return min_acked > committed


class CommitWatch:
    def __init__(self) -> None:
        self.suspects: dict[Any, int] = {}  # partition -> committed offset seen skipped last time

    def check(self, consumer: Any, assigned: Collection[Any],
              acknowledged: Callable[[str], bool]) -> list[tuple[Any, int]]:
        """The partitions to seek back (and where to): suspected in two rounds in a row.
        ``acknowledged`` tells the topics whose records agents acknowledge (faust's own
        answer); changelogs are read by recovery and never acknowledged."""
        in_flight = {(m.tp, m.offset) for m in list(consumer._unacked_messages)}  # noqa: SLF001
        to_seek, suspects = [], {}
        for tp in assigned:
            if not acknowledged(tp.topic):
                continue
            committed = consumer._committed_offset.get(tp)  # noqa: SLF001
            acked = consumer._acked.get(tp)  # noqa: SLF001
            gap = consumer._gap.get(tp)  # noqa: SLF001
            if not skipped(committed, min(acked) if acked else None,
                           (tp, committed) in in_flight,
                           bool(gap) and committed is not None and gap.overlaps(committed)):
                continue
            if self.suspects.get(tp) == committed:
                to_seek.append((tp, committed))
            else:
                suspects[tp] = committed
        self.suspects = suspects
        return to_seek


def register(app: Any) -> CommitWatch:
    """The commit watch's punctuator on ``app`` (a faust app)."""
    watch = CommitWatch()

    @app.timer(interval=WATCH_S, name=f"{__name__}.watch_commits")
    async def watch_commits() -> None:
        if app.rebalancing or app.in_recovery or not app.tables.recovery.completed.is_set():
            watch.suspects.clear()  # offsets move while partitions are handed over: start again
            return
        consumer = app.consumer
        for tp, committed in watch.check(consumer, consumer.assignment(),
                                         app.topics.acks_enabled_for):
            acked = consumer._acked.get(tp) or [committed]  # noqa: SLF001
            log.warning("%s partition %d: records from the committed offset %d were never "
                        "handed to its agent (the first acknowledged is %d); seeking back to "
                        "deliver them", tp.topic, tp.partition, committed, min(acked))
            metrics.SKIPPED_RECORDS_REDELIVERED.labels(tp.topic).inc()
            await consumer.seek(tp, committed)

    return watch
