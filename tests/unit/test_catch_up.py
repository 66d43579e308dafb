"""Catch-up pacing: a missed slot that must wait is given its turn once, and the partition's
fired-through mark stays below it until it has been decided (``streams.catch_up``)."""

import pytest

from bench.spike import job
from streams import misfire, scheduler
from streams.catch_up import CatchUpLane
from streams.codec import codec
from streams.due_index import DueIndex
from streams.pacing import TokenBucket
from streams.schedule import fire_id
from streams.topology import FIRED
from tests.unit.test_fired_records import Recorder


def test_a_reservation_queues_behind_the_ones_before_it():
    bucket = TokenBucket(rate_per_s=10, burst=2)
    assert bucket.reserve(0.0) == 0.0 and bucket.reserve(0.0) == 0.0
    assert [bucket.reserve(0.0) for _ in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    assert not bucket.take(0.25), "the last turn has not come yet"
    assert bucket.wait_s(0.25) == pytest.approx(0.15)


def test_a_lane_gives_each_waiting_slot_one_turn_and_holds_the_mark_below_the_earliest():
    lane = CatchUpLane(rate_per_s=100)
    now = 50_000
    turns = [lane.turn(f"job-{i}", 1_000, 1_000 + i, now) for i in range(150)]
    assert turns[:100] == [None] * 100, "a full bucket: the first hundred go now"
    assert turns[100:] == [now + 10 * (k + 1) for k in range(50)], "then one every 10 ms"
    assert lane.mark_bound(now, nothing_due=True) == 1_000 + 100 - 1
    assert lane.turn("job-120", 1_000, 1_120, turns[120]) is None, "its own turn come back"
    assert lane.turn("job-120", 1_000, 1_120, turns[120]) == now + 510, "a turn is used once"
    last = now + 510
    assert lane.mark_bound(last, nothing_due=False) == 1_099, "a slot due is still undecided"
    assert lane.mark_bound(last - 1, nothing_due=True) == 1_099, "a turn has not come yet"
    assert lane.mark_bound(last, nothing_due=True) is None
    assert lane.turns == {}


def test_the_mark_follows_the_earliest_slot_still_waiting():
    lane = CatchUpLane(rate_per_s=1)
    now = 50_000
    assert lane.turn("first", 1_000, 1_000, now) is None, "the bucket's one token"
    turns = {name: lane.turn(name, due, due, now)
             for name, due in (("a", 1_010), ("b", 1_020), ("c", 1_030))}
    assert lane.mark_bound(now, nothing_due=True) == 1_009
    assert lane.turn("a", 1_010, 1_010, turns["a"]) is None
    assert lane.mark_bound(turns["a"], nothing_due=True) == 1_019, "a's turn was used"
    assert lane.waiting() == {"b": (1_020, 1_020), "c": (1_030, 1_030)}


class Jobs:
    """The jobs table as ``ScheduleState`` reads it (``get_in``)."""

    def __init__(self, jobs: dict[str, bytes]) -> None:
        self.jobs = jobs

    def get_in(self, partition: int, key: bytes) -> bytes | None:
        return self.jobs.get(key.decode())


SLOT = 1_800_000_000_000  # a minute boundary


def late_backlog(monkeypatch, jobs: int) -> tuple[scheduler.ScheduleState, list[int], dict,
                                                  list[dict]]:
    """A worker that took a partition over 11 s after ``jobs`` fire_all slots fell due on it
    (over the 5 s misfire threshold): its state, its clock, the jobs, the decisions made."""
    clock = [SLOT + 11_000]
    monkeypatch.setattr(scheduler, "now_ms", lambda: clock[0])
    monkeypatch.setattr(scheduler, "FIRE_BUDGET_S", 60.0)  # not the machine's speed
    monkeypatch.setattr(scheduler.ScheduleState, "done_mark", staticmethod(lambda p, f: None))
    yearly = "0 0 0 1 1 *"
    raw = {f"job-{i}": job(f"job-{i}", yearly, SLOT - 60_000, "fire_all", 3600)
           for i in range(jobs)}
    monkeypatch.setattr(scheduler, "jobs_table", Jobs(raw))
    decisions: list[dict] = []
    real_decide = misfire.decide
    monkeypatch.setattr(misfire, "decide", lambda **kw: decisions.append(kw) or real_decide(**kw))
    state = scheduler.ScheduleState()
    state._emitter = Recorder()
    state.indexes[0] = DueIndex()
    state.fired_through[0] = SLOT - 1
    for job_id in raw:
        state.indexes[0].set(job_id, SLOT)
    return state, clock, raw, decisions


def test_a_backlog_of_missed_slots_is_decided_twice_at_most_and_never_passed_by_the_mark(
        monkeypatch):
    """Each missed slot is decided once to find it must wait and once at its turn; before
    turns, the scheduler put the same slots back every few milliseconds and spent every tick
    doing so, with the executor on its event loop starved (``bench.failover --spike``)."""
    state, clock, raw, decisions = late_backlog(monkeypatch, 1_000)
    recorder, index, slot = state._emitter, state.indexes[0], SLOT

    state.fire_due()
    assert len(recorder.values) == scheduler.CATCH_UP_PER_S, "a second's turns go at once"
    assert len(decisions) == 1_000, "the others were decided once, to be given their turns"
    assert state.fired_through[0] == slot - 1, "the mark may not pass the waiting slots"
    turns = 1_000 - scheduler.CATCH_UP_PER_S
    last_turn = clock[0] + turns * 1000 // scheduler.CATCH_UP_PER_S
    assert index.peek() == clock[0] + 1000 // scheduler.CATCH_UP_PER_S
    while clock[0] < last_turn:
        clock[0] += 50  # the punctuator's tick
        state.fire_due()
        assert state.fired_through[0] == slot - 1 or clock[0] >= last_turn

    fired = [codec().decode(v) for v, t in zip(recorder.values, recorder.topics, strict=True)
             if t == FIRED.name]
    assert sorted(r["fire_id"] for r in fired) == sorted(fire_id(j, slot) for j in raw)
    assert {r["decision"] for r in fired} == {"missed_caught_up"}
    assert len(decisions) == 1_000 + turns, "each waiting slot decided once more, at its turn"
    assert state.fired_through[0] == clock[0], "every turn has come: the mark moves on"


def test_a_partition_given_up_puts_its_waiting_slots_back_at_their_due_times(monkeypatch):
    """faust's rebalances revoke every partition and hand most back: the lane goes with the
    revocation, so the slots waiting in the warm index must hold the next mark by themselves."""
    state, clock, raw, _ = late_backlog(monkeypatch, 600)
    state.fire_due()
    waiting = state.catch_up[0].waiting()
    assert len(waiting) == 600 - scheduler.CATCH_UP_PER_S
    state.drop(0)
    index = state.warm[0].index
    assert index.peek() == SLOT, "back at their due time, not at their turns"
    state.indexes[0] = state.warm.pop(0).index  # adopted again by the next rebuild
    clock[0] += 50
    state.fire_due()
    assert state.fired_through[0] == SLOT - 1
    assert len(state.catch_up[0].waiting()) == len(waiting) - scheduler.CATCH_UP_PER_S, \
        "given their turns again (a new lane's full bucket first)"
