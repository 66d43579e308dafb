from hypothesis import given
from hypothesis import strategies as st

from streams.due_index import DueIndex


def test_pops_due_jobs_earliest_first_and_leaves_future_ones():
    index = DueIndex()
    index.set("b", 20)
    index.set("a", 10)
    index.set("c", 99)
    assert index.pop_due(50, 10) == [("a", 10), ("b", 20)]
    assert len(index) == 1 and index.peek() == 99


def test_reschedule_and_remove_discard_the_old_entry():
    index = DueIndex()
    index.set("a", 10)
    index.set("a", 30)
    index.set("b", 15)
    index.remove("b")
    assert index.pop_due(20, 10) == []
    assert index.pop_due(30, 10) == [("a", 30)]
    index.set("c", 5)
    index.set("c", None)
    assert index.peek() is None and "c" not in index


def test_limit_bounds_one_pop():
    index = DueIndex()
    for i in range(10):
        index.set(f"j{i}", i)
    assert [j for j, _ in index.pop_due(100, 4)] == ["j0", "j1", "j2", "j3"]
    assert len(index) == 6


@given(st.lists(st.tuples(st.sampled_from("abcdefgh"), st.one_of(st.none(),
                                                                  st.integers(0, 1000)))),
       st.integers(0, 1000))
def test_behaves_like_a_dict_of_next_slots(ops, now):
    index, model = DueIndex(), {}
    for job, slot in ops:
        index.set(job, slot)
        if slot is None:
            model.pop(job, None)
        else:
            model[job] = slot
    due = index.pop_due(now, 1000)
    expected = sorted(((s, j) for j, s in model.items() if s <= now))
    assert sorted((s, j) for j, s in due) == expected
    assert [s for _, s in due] == sorted(s for _, s in due)
    assert len(index) == len(model) - len(expected)
