"""A partition's new owner leaves the slots its previous owner fired past the mark to their
records (``streams.scheduling.fired_tail``), and still expects their decisions."""

import pytest

from bench.spike import job
from streams.runtime.codec import codec
from streams.scheduling import fired_tail
from streams.scheduling.due_index import DueIndex
from streams.scheduling.fired_tail import previous_fires
from streams.scheduling.schedule import fire_id
from streams.topology import FIRED
from tests.unit.fakes import Jobs, schedule_state


def test_only_records_the_executor_admits_count_as_fired():
    records = [(0, "a@1", 3, 100), (1, "b@1", 2, 101),
               (0, "a@1", 3, 140),  # the same slot again: its first record counts
               (0, "c@1", 4, 150),  # a newer owner
               (0, "d@1", 3, 160),  # the older epoch after it: a zombie's, fenced off
               (1, "e@1", 2, 170)]
    assert previous_fires(records) == {0: {"a@1": 100, "c@1": 150}, 1: {"b@1": 101, "e@1": 170}}


def test_a_slot_the_previous_owner_fired_is_expected_not_fired_again():
    slot = 1_800_000_000_000
    now = slot + 11_000  # the takeover, 11 s after the spike's second
    raw = {name: job(name, "0 * * * * *", slot - 60_000, "fire_all", 3600)
           for name in ("fired-by-victim", "never-fired")}
    state = schedule_state(Jobs(raw), clock=lambda: now)
    recorder = state._emitter
    index = state.partitions.indexes[2] = DueIndex()
    for name in raw:
        index.set(name, slot)
    state.partitions.takeover.adopt(2, {fire_id("fired-by-victim", slot): slot + 120,
                             fire_id("triggered", slot - 30_000): slot + 130})

    state.fire_due()

    fired = [codec().decode(v) for v, t in zip(recorder.values, recorder.topics, strict=True)
             if t == FIRED.name]
    assert [(r["job_id"], r["decision"]) for r in fired] == [("never-fired", "missed_caught_up")]
    expected = state.reconciler.pending[fire_id("fired-by-victim", slot)]
    assert (expected.partition, expected.emitted_ms, expected.redrives) == (2, slot + 120, 0)
    assert index.next_slot("fired-by-victim") == slot + 60_000, "its following slot is owed"
    assert 2 not in state.partitions.takeover.fired_before, "the mark passed them all: nothing is asked again"


def test_slots_a_previous_owner_fired_are_settled_after_the_slots_due_now(monkeypatch):
    """The victim fired its first slots in the order its survivor reaches them: those come out
    of the index first, and only after the slots due now have fired are their jobs read and
    their following slots indexed, the mark held below them meanwhile."""
    from tests.unit.scheduling.test_catch_up import SLOT, late_backlog

    state, clock, _ = late_backlog(monkeypatch, once=0, every_second=305)
    state.partitions.takeover.adopt(0, {fire_id(f"every-{i}", SLOT): SLOT + 100 for i in range(300)})
    state.prepare_budget_s = 0.0  # no time left to settle
    state.fire_due()
    fired = [codec().decode(v) for v in state._emitter.values]
    assert sorted(r["job_id"] for r in fired) == [f"every-{i}" for i in range(300, 305)]
    assert len(state.partitions.takeover.to_settle[0]) == 300
    assert fire_id("every-0", SLOT) not in state.reconciler.pending
    assert state.partitions.fired_through[0] == SLOT - 1, "their following slots are not indexed yet"

    state.prepare_budget_s = 60.0
    clock[0] += 10
    state.fire_due()
    assert 0 not in state.partitions.takeover.to_settle
    assert state.reconciler.pending[fire_id("every-0", SLOT)].emitted_ms == SLOT + 100
    assert state.partitions.indexes[0].next_slot("every-0") == SLOT + 1_000
    assert state.partitions.fired_through[0] == SLOT + 1_000 - 1


def test_a_read_that_failed_is_tried_again_on_a_new_client_within_its_timeout(
        monkeypatch) -> None:
    """A client with a stale view of a node that came back waited out the whole 10 s; a new
    one answered at once. Each try gets a share of the timeout; the last failure is raised."""


    tries: list[float] = []

    def read_once(bootstrap, since, timeout_s, topic):
        tries.append(timeout_s)
        if len(tries) == 1:
            raise TimeoutError("reading stalled")
        return [(0, "f-1", 3, 1_000)]

    monkeypatch.setattr(fired_tail, "_read_once", read_once)
    assert fired_tail.read("b", {0: 900, 1: 0}, timeout_s=9.0) == {0: {"f-1": 1_000}}
    assert tries == [3.0, 3.0]

    def never(bootstrap, since, timeout_s, topic):
        tries.append(timeout_s)
        raise RuntimeError("no leader")

    tries.clear()
    monkeypatch.setattr(fired_tail, "_read_once", never)
    with pytest.raises(RuntimeError, match="no leader"):
        fired_tail.read("b", {0: 900}, timeout_s=9.0)
    assert len(tries) == fired_tail.ATTEMPTS
