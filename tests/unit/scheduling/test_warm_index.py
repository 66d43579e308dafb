"""Warm standby indexes (``streams.scheduling.warm_index``): a takeover adopts the index a standby kept,
and what it then holds is exactly what a rebuild from the table would have built."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.spike import job
from streams.runtime.codec import codec
from streams.scheduling import deciding, slots
from streams.scheduling.due_index import DueIndex
from streams.scheduling.warm_index import WarmIndex
from tests.unit.fakes import Runs

CRONS = ["* * * * * *", "*/7 * * * * *", "0 * * * * *", "0 0 1 1 *", "H/5 * * * *"]


class Partitions:
    """A key-ordered store per partition; each ``items`` call reads a snapshot of that moment,
    as a fresh RocksDB iterator does."""

    def __init__(self) -> None:
        self.data: dict[int, dict[bytes, bytes]] = {}

    def items_in(self, part: int, from_key: bytes | None = None) -> list[tuple[bytes, bytes]]:
        rows = sorted(self.data.get(part, {}).items())
        return [(k, v) for k, v in rows if from_key is None or k >= from_key]

    def get_in(self, part: int, key: bytes) -> bytes | None:
        return self.data.get(part, {}).get(key)


def entries(index: DueIndex) -> dict[str, int | None]:
    return {job_id: index.next_slot(job_id) for job_id in index.jobs()}


def record(part: int, key: bytes, value: bytes | None, offset: int = 0) -> Any:
    return SimpleNamespace(message=SimpleNamespace(partition=part, key=key, value=value,
                                                   offset=offset))


@pytest.fixture
def table() -> Partitions:
    return Partitions()


class Marks:
    """The progress marks a takeover reads (``progress.load_marks``), set by the test."""

    def __init__(self) -> None:
        self.marks: dict[int, int] = {}

    def __call__(self, _bootstrap: str) -> dict[int, int]:
        return dict(self.marks)


def state_on(table: Partitions) -> tuple[deciding.ScheduleState, Marks]:
    marks = Marks()
    # no broker: the fired tail since the mark is empty (reading it asked whatever broker was on
    # the default port, or waited out its timeout, 10 s, when there was none)
    return deciding.ScheduleState(table, Runs(), load_marks=marks,
                                   read_fired=lambda _bootstrap, _marks: {}), marks


def rebuilt(table: Partitions, part: int, mark: int) -> dict[str, int | None]:
    """What a rebuild from the table alone indexes for ``part`` resuming from ``mark``."""
    index = DueIndex()
    for _key, raw in table.items_in(part):
        slots.index_job(index, codec().decode(raw), mark)
    return entries(index)


def adopt(state: deciding.ScheduleState, marks: Marks, part: int, mark: int) -> None:
    marks.marks = {part: mark}
    state.rebuild({part}, set())


def test_a_scan_in_steps_with_writes_between_them_ends_with_the_table_as_it_is_then(
        table: Partitions) -> None:
    table.data[0] = {f"j{i:03d}".encode(): job(f"j{i:03d}", "0 0 1 1 *", 1_000)
                     for i in range(50)}
    state, marks = state_on(table)
    warm = state.partitions.warm[0] = WarmIndex()
    steps = 0
    while not warm.complete:
        steps += state.partitions.warm_up() > 0
        # between two steps the owner's changelog deletes one job and rewrites another
        gone, changed = f"j{steps * 7 % 50:03d}".encode(), f"j{steps * 11 % 50:03d}".encode()
        table.data[0].pop(gone, None)
        state.partitions.apply_changelog([record(0, gone, None)])
        if changed in table.data[0]:
            table.data[0][changed] = job(changed.decode(), "*/7 * * * * *", 2_000 + steps)
            state.partitions.apply_changelog([record(0, changed, table.data[0][changed])])
    assert steps == 1  # fifty jobs are one step; now in small steps, as on a large partition
    table.data[1] = {f"k{i:05d}".encode(): job(f"k{i:05d}", "0 0 1 1 *", 1_000)
                     for i in range(2_500)}
    warm1 = state.partitions.warm[1] = WarmIndex()
    while not warm1.complete:
        state.partitions.warm_up()
        table.data[1].pop(b"k%05d" % (len(warm1.index) + 3), None)
        state.partitions.apply_changelog([record(1, b"k%05d" % (len(warm1.index) + 3), None)])
    assert entries(warm.index) == rebuilt(table, 0, 0)
    assert entries(warm1.index) == rebuilt(table, 1, 0)
    assert len(warm1.index) < 2_500


def test_a_takeover_adopts_the_warm_index_and_reindexes_only_what_the_mark_passed(
        table: Partitions) -> None:
    table.data[3] = {f"j{i}".encode(): job(f"j{i}", CRONS[i % len(CRONS)], 10_000 + i)
                     for i in range(40)}
    state, marks = state_on(table)
    state.partitions.warm[3] = WarmIndex()
    state.partitions.apply_changelog([record(3, k, v) for k, v in table.data[3].items()])
    state.partitions.warm[3].scan_from = None  # the standby read the changelog from its start
    warm_index = state.partitions.warm[3].index
    adopt(state, marks, 3, 125_000)
    assert state.partitions.indexes[3] is warm_index and 3 not in state.partitions.warm
    assert entries(state.partitions.indexes[3]) == rebuilt(table, 3, 125_000)


def test_a_revoked_partition_stays_warm_without_its_preparations_and_comes_back_whole(
        table: Partitions) -> None:
    table.data[2] = {f"j{i}".encode(): job(f"j{i}", "* * * * * *", 1_000) for i in range(5)}
    state, marks = state_on(table)
    adopt(state, marks, 2, 0)  # no warm index: a rebuild
    index = state.partitions.indexes[2]
    for job_id, slot in index.stage(5_000, 10):
        index.attach(job_id, ("prepared", slot))
    state.drop(2)
    assert state.partitions.warm[2].complete and state.partitions.warm[2].index.prepared == 0
    state.partitions.apply_changelog([record(2, b"j0", None)])  # the new owner deletes one
    table.data[2].pop(b"j0")
    state.rebuild(set(), {2})
    assert 2 in state.partitions.warm  # a standby now
    adopt(state, marks, 2, 90_000)  # and back, after the other owner fired to 90 s
    assert entries(state.partitions.indexes[2]) == rebuilt(table, 2, 90_000)
    assert all(prep is None for _, _, prep in state.partitions.indexes[2].pop_due(10**13, 100))


def test_a_partition_neither_held_nor_a_standby_is_forgotten(table: Partitions) -> None:
    state, marks = state_on(table)
    state.partitions.warm[4] = WarmIndex()
    state.rebuild(set(), {5})
    assert set(state.partitions.warm) == {5}


def test_an_unreadable_changelog_record_makes_the_partition_be_read_again(
        table: Partitions) -> None:
    state, marks = state_on(table)
    state.partitions.warm[1] = WarmIndex(scan_from=None)
    state.partitions.apply_changelog([record(1, b"bad", b"\x00not avro")])
    assert not state.partitions.warm[1].complete


@settings(max_examples=300, deadline=None)
@given(cron=st.sampled_from(CRONS), updated=st.integers(1_000, 10**7),
       mark=st.integers(0, 2 * 10**7), at=st.one_of(st.none(), st.integers(1_000, 10**7)))
def test_live_then_from_the_mark_is_what_indexing_from_the_mark_gives(
        cron: str, updated: int, mark: int, at: int | None) -> None:
    """Why adoption is sound: an entry computed at the job's update that the mark has not
    passed is the one computing from the mark gives; one it passed is computed again."""
    one = codec().decode(job("j", cron, updated))
    if at is not None:
        one["schedule"] = {**one["schedule"], "cron": None, "at_ms": at}
    warm, direct = DueIndex(), DueIndex()
    slots.index_job(warm, one, None)
    if "j" in warm.slots_through(mark):
        slots.index_job(warm, one, mark)
    slots.index_job(direct, one, mark)
    assert entries(warm) == entries(direct)


def test_standbys_behind_counts_each_changelogs_unread_records() -> None:
    from faust.types import TP

    from streams.runtime import standbys

    ends = {TP("jobs-changelog", 0): 100, TP("jobs-changelog", 1): 50,
            TP("done-changelog", 0): 7, TP("done-changelog", 1): None}
    seen = {TP("jobs-changelog", 0): 89, TP("done-changelog", 0): 6}  # partition 1: none yet
    app = SimpleNamespace(
        tables=SimpleNamespace(recovery=SimpleNamespace(standby_tps=set(ends),
                                                        standby_offsets=seen)),
        consumer=SimpleNamespace(highwater=ends.get, assignment=lambda: set(ends)))
    assert standbys.behind(app) == {"jobs-changelog": 10 + 50, "done-changelog": 0}
    # mid-rebalance faust's standby set can name a partition the consumer no longer has:
    # asking aiokafka for its highwater then raises, and in a timer that stopped the worker
    app.consumer.assignment = lambda: {TP("jobs-changelog", 0)}
    assert standbys.behind(app) == {"jobs-changelog": 10}


def test_standbys_are_kept_only_for_the_tables_topology_marks_standby():
    from streams.runtime.standbys import StandbyAssignor, kept
    from streams.topology import APP_ID, JOBS_TABLE, SEND_CHUNKS_TABLE, TABLES

    changelogs = StandbyAssignor.standby_changelogs
    assert JOBS_TABLE.changelog(APP_ID) in changelogs
    assert SEND_CHUNKS_TABLE.changelog(APP_ID) not in changelogs
    assert changelogs == {t.changelog(APP_ID) for t in TABLES if t.standby}
    member = {JOBS_TABLE.changelog(APP_ID): [4, 5], SEND_CHUNKS_TABLE.changelog(APP_ID): [4, 5]}
    assert kept(member, changelogs) == {JOBS_TABLE.changelog(APP_ID): [4, 5]}


def test_a_takeover_resumes_a_jittered_slot_the_previous_owner_had_not_reached():
    """The owner's mark is a due time: a slot nominally before it but jittered past it is still
    owed; one whose due time the mark passed was decided and is not indexed again."""
    one = codec().decode(job("j", "0 * * * * *", 1_000))
    one["jitter_s"] = 30
    slot = 1_800_000_000_000 - 1_800_000_000_000 % 60_000
    while slots.due_ms(one, slot) == slot:  # a slot the jitter really delays
        slot += 60_000
    due = slots.due_ms(one, slot)
    for mark, expected in ((due - 1, slot), (due, slot + 60_000), (slot - 1, slot)):
        index = DueIndex()
        slots.index_job(index, one, mark)
        assert index.next_slot("j") == expected, (mark - slot, due - slot)
    plain = codec().decode(job("p", "0 * * * * *", 1_000))
    index = DueIndex()
    slots.index_job(index, plain, slot)
    assert index.next_slot("p") == slot + 60_000
