"""Table recovery a zombie cannot fool: the persisted offset only advances over this process's own
unbroken writes, and a state-machine table never moves a key backwards during recovery."""

from __future__ import annotations

from streams.state import contiguous_advance, regresses

RANK = {b"intent": 1, b"done": 2}


def test_own_writes_in_a_row_advance_the_persisted_offset() -> None:
    pending: set[int] = set()
    assert contiguous_advance(99, 100, pending) == 100
    assert contiguous_advance(100, 101, pending) == 101
    assert pending == set()


def test_a_fresh_partition_starts_before_offset_zero() -> None:
    assert contiguous_advance(None, 0, set()) == 0


def test_out_of_order_acks_join_the_run_once_the_gap_closes() -> None:
    pending: set[int] = set()
    assert contiguous_advance(10, 12, pending) is None
    assert contiguous_advance(10, 11, pending) == 12
    assert pending == set()


def test_the_zombie_case_a_foreign_record_stops_the_run() -> None:
    """The paused worker's last own write was offset 2339; the new owner wrote 2340..2388; the
    zombie then wrote 2389 and 2390. faust would persist 2390 and recovery would skip the owner's
    records; the guarded table stays at 2339 so recovery reads them."""
    pending: set[int] = set()
    assert contiguous_advance(2339, 2389, pending) is None
    assert contiguous_advance(2339, 2390, pending) is None
    assert pending == {2389, 2390}


def test_acks_at_or_below_the_persisted_offset_change_nothing() -> None:
    pending: set[int] = set()
    assert contiguous_advance(50, 50, pending) is None
    assert contiguous_advance(50, 7, pending) is None
    assert pending == set()


def test_a_late_intent_never_undoes_a_done_chunk() -> None:
    assert regresses(RANK, b"done", b"intent")
    assert not regresses(RANK, b"intent", b"done")
    assert not regresses(RANK, None, b"intent")
    assert not regresses(RANK, b"done", None)  # a tombstone is not a state of the machine
    assert not regresses(RANK, b"done", b"done")
