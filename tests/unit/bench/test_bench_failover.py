from bench import failover
from streams.scheduling import schedule
from streams.topology import partition_for

MINUTE = 1_795_590_720_000  # 2026-11-25T07:12:00Z


def test_a_spike_job_is_due_at_its_second_and_not_again_within_the_year():
    cron = failover.once_at(MINUTE)
    assert cron == "0 12 7 25 11 *"
    at = {"cron": cron, "timezone": "UTC", "start_ms": MINUTE}
    assert schedule.next_after(at, "j", MINUTE - 1) == MINUTE
    following = schedule.next_after(at, "j", MINUTE)
    assert following is None or following - MINUTE >= 364 * 86_400_000


def test_spike_slots_are_told_apart_by_who_fired_them_and_when():
    jobs = [f"spike-{i}" for i in range(40)]
    victim = {partition_for(jobs[0], 8)}
    theirs = [j for j in jobs if partition_for(j, 8) in victim]
    assert len(theirs) >= 3
    killed = MINUTE + 250
    fired = [(theirs[0], 0, MINUTE + 100),  # by the victim before the kill
             (theirs[1], 0, MINUTE + 12_000),  # by the survivor after it
             (theirs[1], 0, MINUTE + 12_500)]  # fired again: its first record counts
    other = next(j for j in jobs if partition_for(j, 8) not in victim)
    fired.append((other, 1, MINUTE + 90_000))  # a job of a partition the survivor always held
    figures = failover.spike_figures(jobs, MINUTE, killed, fired, victim, 8)
    assert figures["of them on the killed worker's partitions"] == len(theirs)
    assert figures["fired by it before the kill"] == 1
    assert figures["fired after the kill"] == 1
    assert figures["never fired"] == len(theirs) - 2
    assert figures["last of them fired, s after the spike"] == 12.0


def test_spike_decisions_are_counted_once_each_and_timed_from_the_kill():
    slots = {"a@1", "b@1", "c@1"}
    killed = MINUTE + 250
    ledger = [("a@1", 0, MINUTE + 900), ("b@1", 1, MINUTE + 40_250),
              ("b@1", 1, MINUTE + 41_000),  # a second decision of the same slot
              ("x@1", 0, MINUTE + 99_000)]  # not a spike slot
    figures = failover.decision_figures(slots, killed, ledger)
    assert figures == {"slots without a decision (missed)": 1,
                       "slots decided more than once": 1,
                       "every slot decided, s after the kill": None}
    ledger.append(("c@1", 2, MINUTE + 60_250))
    figures = failover.decision_figures(slots, killed, ledger)
    assert figures["every slot decided, s after the kill"] == 60.0
    assert figures["slots without a decision (missed)"] == 0
