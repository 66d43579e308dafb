"""The cleanup crew (``streams.scheduling.reconciler``)."""


from streams.scheduling.reconciler import ExecutorQueue, Pending, Reconciler, behind


def pending(fid="j@1", nominal=0, emitted=0, lateness=3600_000):
    return Pending(fid, "j", 0, nominal, emitted, lateness)


def test_reconciler_redrives_then_expires_and_counts():
    rec = Reconciler(lag_ms=100, max_redrives=1)
    rec.expect(pending())
    assert rec.sweep(50) == []
    first = rec.sweep(150)
    assert [c.action for c in first] == ["redrive"]
    assert rec.sweep(200) == [], "a re-driven slot waits another lag"
    second = rec.sweep(300)
    assert [c.action for c in second] == ["expire"] and "re-drives" in second[0].reason
    assert rec.caught == {"redrive": 1, "expire": 1} and not rec.pending


def test_reconciler_leaves_resolved_and_in_flight_slots_alone():
    rec = Reconciler(lag_ms=100)
    rec.expect(pending("a@1"))
    rec.expect(pending("b@1"))
    rec.resolve("a@1")
    assert rec.sweep(1000, in_flight={"b@1"}) == []
    assert list(rec.pending) == ["b@1"]


def test_a_slot_still_queued_behind_a_busy_executor_is_not_overdue():
    rec = Reconciler(lag_ms=100)
    rec.expect(pending(emitted=1_000))
    working = {0: ExecutorQueue(fired_ms=900, next_offset=50, end_offset=9_000)}
    assert rec.sweep(200_000, queues=working) == [] and list(rec.pending) == ["j@1"]
    assert rec.sweep(200_000, queues={1: working[0]}) != [], "another partition's queue: no"


def test_a_slot_the_executor_had_the_chance_to_read_is_overdue():
    assert behind(1_000, ExecutorQueue(fired_ms=999, next_offset=50, end_offset=51))
    assert not behind(1_000, ExecutorQueue(1_000, 50, 9_000)), "went past it: lost or dropped"
    assert not behind(1_000, ExecutorQueue(900, 9_000, 9_000)), "nothing left to take up"
    assert not behind(1_000, ExecutorQueue(900, 50, None)), "the partition's end not known"
    assert not behind(1_000, None), "nothing taken up since the partition came"
    rec = Reconciler(lag_ms=100)
    rec.expect(pending(emitted=1_000))
    caught = rec.sweep(200_000, queues={0: ExecutorQueue(900, 9_000, 9_000)})
    assert [c.action for c in caught] == ["redrive"], "a lost record on a quiet partition"


def test_an_overdue_slot_whose_outcome_is_recorded_is_resolved_not_caught():
    rec = Reconciler(lag_ms=100)
    rec.expect(pending("a@1"))
    rec.expect(pending("b@1"))
    caught = rec.sweep(1000, recorded=lambda item: item.fire_id == "a@1")
    assert [c.pending.fire_id for c in caught] == ["b@1"]
    assert "a@1" not in rec.pending and rec.caught == {"redrive": 1, "expire": 0}


def test_reconciler_expires_slots_past_max_lateness():
    rec = Reconciler(lag_ms=100)
    rec.expect(pending(lateness=500))
    catch = rec.sweep(1000)[0]
    assert catch.action == "expire" and "max lateness" in catch.reason
