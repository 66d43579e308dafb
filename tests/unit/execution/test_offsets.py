from hypothesis import given
from hypothesis import strategies as st

from streams.execution.offsets import Taken


def test_only_the_contiguous_resolved_prefix_is_committed():
    taken = Taken()
    taken.assign(0, 100)
    for offset in range(100, 105):
        assert taken.take(0, offset)
    taken.resolve(0, 101)
    taken.resolve(0, 102)
    assert taken.committable() == {}, "100 is unresolved: nothing past it may be committed"
    taken.resolve(0, 100)
    assert taken.committable() == {0: 103}
    assert taken.committable() == {}, "handed out once until it moves again"
    taken.resolve(0, 104)
    assert taken.commit_point(0) == 103
    taken.resolve(0, 103)
    assert taken.committable() == {0: 105}


def test_a_record_read_again_after_a_new_assignment_is_not_taken_twice():
    taken = Taken()
    taken.assign(3, 10)
    assert [taken.take(3, o) for o in (10, 11, 12)] == [True, True, True]
    assert not taken.take(3, 11), "read before: the same record"
    assert not taken.take(4, 0), "a partition not assigned"
    taken.assign(3, 11)  # assigned anew at its commit: 11 and 12 come again and are taken again
    assert taken.take(3, 11) and taken.take(3, 12)
    taken.resolve(3, 10)  # a slot of the earlier assignment, behind the new start: ignored
    assert taken.commit_point(3) == 11


def test_a_failed_commit_is_handed_out_again():
    taken = Taken()
    taken.assign(0, 0)
    taken.take(0, 0)
    taken.resolve(0, 0)
    assert taken.committable() == {0: 1}
    taken.uncommitted(0, 1)
    assert taken.committable() == {0: 1}


def test_an_unknown_start_is_set_by_the_first_record():
    taken = Taken()
    taken.assign(0, None)
    assert taken.committable() == {}
    assert taken.take(0, 42)
    assert taken.commit_point(0) == 42
    taken.resolve(0, 42)
    assert taken.committable() == {0: 43}


@given(st.permutations(list(range(30))), st.integers(0, 30))
def test_the_commit_never_passes_an_unresolved_record(order, resolved_count):
    taken = Taken()
    taken.assign(0, 0)
    for offset in range(30):
        taken.take(0, offset)
    done = set(order[:resolved_count])
    for offset in order[:resolved_count]:
        taken.resolve(0, offset)
    point = taken.commit_point(0)
    assert all(o in done for o in range(point)), "committed past an unresolved record"
    assert point == 30 or point not in done, "a resolved prefix left uncommitted"
