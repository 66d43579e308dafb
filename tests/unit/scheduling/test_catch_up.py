"""Catch-up pacing: each job's missed slots go one spacing apart, a slot that must wait is
given its turn once, and the partition's fired-through mark stays below every slot still
waiting (``streams.scheduling.catch_up``)."""

from bench.spike import job
from streams.runtime.codec import codec
from streams.scheduling import deciding, misfire
from streams.scheduling.catch_up import CatchUpLane
from streams.scheduling.due_index import DueIndex
from streams.topology import FIRED
from tests.unit.fakes import Jobs, schedule_state


def test_each_jobs_missed_slots_go_one_spacing_apart_and_a_waiting_slot_waits_once():
    lane = CatchUpLane(per_job_per_s=10)  # 100 ms apart
    now = 50_000
    assert lane.turn("a", 1_000, 1_000, now) is None, "a job's first missed slot goes at once"
    assert lane.turn("b", 1_000, 1_000, now) is None, "and so does another job's"
    assert lane.turn("a", 2_000, 2_000, now) == now + 100
    assert lane.mark_bound(now, nothing_due=True) == 1_999
    assert lane.turn("a", 2_000, 2_000, now + 100) is None, "its turn come back"
    assert lane.turn("a", 3_000, 3_000, now + 100) == now + 200, "a turn is used once"
    assert lane.mark_bound(now + 150, nothing_due=False) == 2_999
    assert lane.turn("a", 3_000, 3_000, now + 200) is None
    assert lane.mark_bound(now + 200, nothing_due=True) is None
    assert lane.turns == {} and lane.ran == {}, "caught up: nothing kept"


def test_the_mark_follows_the_earliest_slot_still_waiting():
    lane = CatchUpLane(per_job_per_s=1)
    now = 50_000
    turns = {}
    for name, due in (("a", 1_010), ("b", 1_020), ("c", 1_030)):
        assert lane.turn(name, due - 1_000, due - 1_000, now - 10) is None
        turns[name] = lane.turn(name, due, due, now)
    assert lane.mark_bound(now, nothing_due=True) == 1_009
    assert lane.turn("a", 1_010, 1_010, turns["a"]) is None
    assert lane.mark_bound(turns["a"], nothing_due=False) == 1_019, "a's turn was used"
    assert lane.waiting() == {"b": (1_020, 1_020), "c": (1_030, 1_030)}


SLOT = 1_800_000_000_000  # a minute boundary
TAKEOVER = SLOT + 11_000  # 11 s late: over the 5 s misfire threshold


def late_backlog(monkeypatch, once: int, every_second: int
                 ) -> tuple[deciding.ScheduleState, list[int], list[dict]]:
    """A worker that took a partition over 11 s after ``once`` fire_all jobs due once fell due
    on it, beside ``every_second`` fire_all jobs due every second: its state, its clock and the
    decisions it makes."""
    clock = [TAKEOVER]
    raw = {f"once-{i}": job(f"once-{i}", "0 0 0 1 1 *", SLOT - 60_000, "fire_all", 3600)
           for i in range(once)}
    raw |= {f"every-{i}": job(f"every-{i}", "* * * * * *", SLOT - 60_000, "fire_all", 3600)
            for i in range(every_second)}
    decisions: list[dict] = []
    real_decide = misfire.decide
    monkeypatch.setattr(misfire, "decide", lambda **kw: decisions.append(kw) or real_decide(**kw))
    state = schedule_state(Jobs(raw), clock=lambda: clock[0],
                           fire_budget_s=60.0)  # not the machine's speed
    state.partitions.indexes[0] = DueIndex()
    state.partitions.fired_through[0] = SLOT - 1
    for job_id in raw:
        state.partitions.indexes[0].set(job_id, SLOT)
    return state, clock, decisions


def fired(state: deciding.ScheduleState) -> list[dict]:
    recorder = state._emitter
    return [codec().decode(v) for v, t in zip(recorder.values, recorder.topics, strict=True)
            if t == FIRED.name]


def test_a_jobs_missed_slots_do_not_wait_behind_other_jobs_and_each_is_decided_twice_at_most(
        monkeypatch):
    """1,000 slots due once (a spike the dead worker had not fired) and a job due every second,
    all found 11 s late: the spike's slots go at once, and the frequent job's 12 missed slots
    go 1/20 s apart instead of queueing behind the spike's; a waiting slot is decided once to
    find it must wait and once at its turn; the mark never passes a slot still waiting."""
    state, clock, decisions = late_backlog(monkeypatch, once=1_000, every_second=1)
    state.fire_due()
    assert len(fired(state)) == 1_001, "every job's first missed slot"
    assert state.partitions.fired_through[0] == SLOT + 1_000 - 1, "held below the job's next missed slot"
    spacing = 1000 // deciding.CATCH_UP_PER_JOB_S
    while clock[0] < TAKEOVER + 11 * spacing:
        clock[0] += 10
        state.fire_due()
        waiting = state.catch_up[0].waiting()
        if waiting:
            assert state.partitions.fired_through[0] < min(due for _, due in waiting.values())

    every = [r for r in fired(state) if r["job_id"] == "every-0"]
    assert [r["nominal_ms"] for r in every] == [SLOT + s * 1000 for s in range(12)]
    missed = [r for r in every if r["decision"] == "missed_caught_up"]  # over 5 s late
    assert len(missed) >= 5 and every[-1]["decision"] == "fired"  # the rest: within 5 s
    gaps = [b["fired_ms"] - a["fired_ms"] for a, b in zip(missed, missed[1:], strict=False)]
    assert min(gaps) >= spacing and max(gaps) <= spacing + 10
    assert {r["decision"] for r in fired(state) if r["job_id"] != "every-0"} == {
        "missed_caught_up"}
    assert len(decisions) == 1_000 + len(every) + len(missed) - 1, \
        "each slot that waited was decided twice"
    assert state.partitions.fired_through[0] == clock[0], "caught up: the mark moves on"


def test_a_partition_given_up_puts_its_waiting_slots_back_at_their_due_times(monkeypatch):
    """faust's rebalances revoke every partition and hand most back: the lane goes with the
    revocation, so the slots waiting in the warm index must hold the next mark by themselves."""
    state, clock, _ = late_backlog(monkeypatch, once=0, every_second=50)
    state.fire_due()  # each job's first missed slot
    clock[0] += 10
    state.fire_due()  # and its second, sent to wait
    assert len(state.catch_up[0].waiting()) == 50
    state.drop(0)
    assert state.partitions.warm[0].index.peek() == SLOT + 1_000, "back at their due time, not their turns"
    state.partitions.indexes[0] = state.partitions.warm.pop(0).index  # adopted again by the next rebuild
    clock[0] += 10
    state.fire_due()
    assert len(fired(state)) == 100, "a new lane lets each job's next missed slot go at once"
    assert state.partitions.fired_through[0] == SLOT - 1 + 2_000, "held below the third"
