"""The fired-through marks (``ScheduleState.maybe_mark``): written only once every record
before them is acknowledged, and never waited for longer than ``MARK_FLUSH_S``, since the
punctuator that fires every partition awaits them."""

from __future__ import annotations

import asyncio

from streams.scheduling.due_index import DueIndex
from streams.scheduling.emission import MARK_FLUSH_S
from streams.topology import SCHEDULER_PROGRESS
from tests.unit.fakes import schedule_state


def test_marks_wait_for_the_records_before_them_but_not_for_a_partition_without_a_leader() -> None:
    state = schedule_state()
    state.partitions.indexes[3] = DueIndex()
    state.partitions.fired_through[3] = 5_000
    recorder = state._emitter
    recorder.unacked = 7  # records of a partition whose leader died, not acknowledged yet

    assert asyncio.run(state.maybe_mark()) is False
    assert recorder.flushes == [MARK_FLUSH_S]  # bounded: the punctuator fires again after it
    assert SCHEDULER_PROGRESS.name not in recorder.topics  # no mark past unacknowledged fires

    state._last_mark = 0.0  # the next round, a second later
    recorder.unacked = 0
    assert asyncio.run(state.maybe_mark()) is True
    assert recorder.topics == [SCHEDULER_PROGRESS.name]
    assert recorder.keys == ["3"]
