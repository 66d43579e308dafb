from hypothesis import given
from hypothesis import strategies as st

from streams.scheduling.due_index import DueIndex


def test_pops_due_jobs_earliest_first_and_leaves_future_ones():
    index = DueIndex()
    index.set("b", 20)
    index.set("a", 10)
    index.set("c", 99)
    assert index.pop_due(50, 10) == [("a", 10, None), ("b", 20, None)]
    assert len(index) == 1 and index.peek() == 99


def test_reschedule_and_remove_discard_the_old_entry():
    index = DueIndex()
    index.set("a", 10)
    index.set("a", 30)
    index.set("b", 15)
    index.remove("b")
    assert index.pop_due(20, 10) == []
    assert index.pop_due(30, 10) == [("a", 30, None)]
    index.set("c", 5)
    index.set("c", None)
    assert index.peek() is None and "c" not in index


def test_limit_bounds_one_pop():
    index = DueIndex()
    for i in range(10):
        index.set(f"j{i}", i)
    assert [j for j, _, _ in index.pop_due(100, 4)] == ["j0", "j1", "j2", "j3"]
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
    assert sorted((s, j) for j, s, _ in due) == expected
    assert [s for _, s, _ in due] == sorted(s for _, s, _ in due)
    assert len(index) == len(model) - len(expected)


def test_staged_entries_pop_in_due_order_with_unstaged_ones():
    index = DueIndex()
    index.set("a", 10)
    index.set("b", 30)
    index.set("c", 50)
    assert index.stage(30, 10) == [("a", 10), ("b", 30)]
    assert index.stage(30, 10) == []  # staged once
    index.set("d", 20)  # unstaged, between staged entries
    index.set("b", 5)  # re-set: the staged entry is superseded, the new one is not staged
    assert index.peek() == 5
    assert index.pop_due(40, 10) == [("b", 5, None), ("a", 10, None), ("d", 20, None)]
    assert index.stage(100, 10) == [("c", 50)]
    index.remove("c")
    assert index.pop_due(100, 10) == [] and len(index) == 0 and index.peek() is None


def test_stage_respects_its_limit():
    index = DueIndex()
    for i in range(5):
        index.set(f"j{i}", i)
    assert [j for j, _ in index.stage(10, 2)] == ["j0", "j1"]
    assert [j for j, _ in index.stage(10, 10)] == ["j2", "j3", "j4"]


def test_a_preparation_lives_and_dies_with_its_entry():
    index = DueIndex()
    for job in "abcd":
        index.set(job, 10)
    index.stage(10, 10)
    for job in "abcd":
        index.attach(job, f"prepared {job}")
    index.set("b", 10)  # the job changed after its slot was prepared: same slot, new entry
    index.remove("c")  # deleted
    index.attach("zz", "not live: ignored")
    assert index.prepared == 2
    # entries due in the same millisecond come in the order they were set (ties are unordered)
    assert sorted(index.pop_due(10, 10), key=str) == [("a", 10, "prepared a"), ("b", 10, None),
                                                      ("d", 10, "prepared d")]
    assert index.prepared == 0


@given(st.lists(st.one_of(
    st.tuples(st.just("set"), st.sampled_from("abcdefgh"),
              st.one_of(st.none(), st.integers(0, 1000))),
    st.tuples(st.just("stage"), st.just(""), st.integers(0, 1000)),
    st.tuples(st.just("pop"), st.just(""), st.integers(0, 1000)),
)))
def test_staging_never_changes_what_pops(ops):
    """Staging is invisible to pop_due, and stages each live entry once per set (a compaction,
    after > 1,024 superseded entries, may stage it again; not reached here)."""
    index, model = DueIndex(), {}
    staged: set[str] = set()
    for op, job, value in ops:
        if op == "set":
            index.set(job, value)
            staged.discard(job)
            if value is None:
                model.pop(job, None)
            else:
                model[job] = value
        elif op == "stage":
            got = index.stage(value, 1000)
            assert all(model[j] == s <= value and j not in staged for j, s in got)
            staged.update(j for j, _ in got)
        else:
            due = index.pop_due(value, 1000)
            expected = sorted((s, j) for j, s in model.items() if s <= value)
            assert sorted((s, j) for j, s, _ in due) == expected
            assert [s for _, s, _ in due] == sorted(s for _, s, _ in due)
            for _, j in expected:
                del model[j]
                staged.discard(j)
        assert len(index) == len(model)
        assert index.peek() == (min(model.values()) if model else None)
