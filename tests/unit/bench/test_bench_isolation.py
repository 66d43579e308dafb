"""bench.isolation: issue 28's victim and fast/slow figures, from arrivals and ledger words."""

from __future__ import annotations

import pytest

from bench import isolation
from streams.scheduling.schedule import fire_id

SPIKE = 1_800_000_060_000  # a minute boundary, ms
MS = 1_000_000  # ns


@pytest.mark.parametrize(("count", "share", "slow"), [(2_000, 0.1, 200), (10, 0.25, 2),
                                                      (7, 0.0, 0), (3, 1.0, 3), (1, 0.1, 0)])
def test_the_slow_share_is_spread_through_the_jobs_and_every_job_is_in_one_group(count, share,
                                                                                 slow):
    ids = [f"j{i:04d}" for i in range(count)]
    fast, slowed = isolation.split_slow(ids, share)
    assert len(slowed) == slow
    assert sorted(fast + slowed) == ids
    if slow >= 2:  # evenly: no two slow jobs further apart than the share says, give or take one
        at = [ids.index(job_id) for job_id in slowed]
        assert max(b - a for a, b in zip(at, at[1:], strict=False)) <= count // slow + 1


def test_expired_stale_is_the_ledgers_word_whatever_the_outcome():
    assert isolation.verdict({"decision": "expired_stale", "outcome": "not_run"}) == "expired_stale"
    assert isolation.verdict({"decision": "fired", "outcome": "succeeded"}) == "succeeded"
    assert isolation.verdict({"decision": "fired", "outcome": "failed"}) == "failed"


def test_a_groups_ledger_counts_only_its_own_slots_and_always_shows_the_three_words():
    verdicts = {"a@1": "succeeded", "b@1": "failed", "c@1": "succeeded", "d@1": "unknown"}
    assert isolation.verdict_counts(verdicts, ["a@1", "b@1", "d@1", "never@1"]) == {
        "succeeded": 1, "failed": 1, "expired_stale": 0, "unknown": 1}
    assert isolation.verdict_counts({}, ["a@1"]) == {"succeeded": 0, "failed": 0,
                                                     "expired_stale": 0}


def test_group_figures():
    figures = isolation.group_figures(4, [100, 300, 5_000], 2, {"succeeded": 2, "failed": 0,
                                                                "expired_stale": 1})
    assert figures[isolation.SLOTS] == 4
    assert figures[isolation.RECEIVED] == 3 and figures[isolation.MISSING] == 1
    assert figures[isolation.DUPLICATES] == 2
    assert (figures[isolation.P50], figures[isolation.MAX]) == (300, 5_000)
    assert figures[isolation.NO_LEDGER] == 1
    empty = isolation.group_figures(0, [], 0, dict.fromkeys(isolation.VERDICTS, 0))
    assert empty[isolation.P99] is None and empty[isolation.MISSING] == 0


def test_the_victims_slots_are_its_seconds_from_the_spike_to_the_last_arrival():
    slots = isolation.victim_slots("v", SPIKE, SPIKE + 3_400)
    assert list(slots.values()) == [SPIKE, SPIKE + 1_000, SPIKE + 2_000, SPIKE + 3_000]
    assert fire_id("v", SPIKE) in slots
    assert list(isolation.victim_slots("v", SPIKE - 1, SPIKE).values()) == [SPIKE]
    assert isolation.victim_slots("v", SPIKE + 1, SPIKE + 999) == {}


def test_victim_figures_against_the_target():
    expected = isolation.victim_slots("v", SPIKE, SPIKE + 2_000)  # 3 slots
    arrivals = [(fire_id("v", SPIKE), (SPIKE + 400) * MS),
                (fire_id("v", SPIKE + 1_000), (SPIKE + 2_500) * MS),
                (fire_id("v", SPIKE + 1_000), (SPIKE + 2_600) * MS),  # a duplicate
                (fire_id("v", SPIKE + 2_000), (SPIKE + 2_700) * MS),
                (fire_id("v", SPIKE - 1_000), (SPIKE + 100) * MS),  # before the window
                (fire_id("spike-0000001", SPIKE), (SPIKE + 50) * MS)]  # not the victim's
    figures = isolation.victim_figures(arrivals, expected)
    assert (figures[isolation.SLOTS], figures[isolation.RECEIVED]) == (3, 3)
    assert (figures[isolation.MISSING], figures[isolation.DUPLICATES]) == (0, 1)
    assert (figures[isolation.P50], figures[isolation.MAX]) == (700, 1_500)
    assert figures[isolation.TARGET] == 2_000 and figures[isolation.MET] is True

    late = isolation.victim_figures([(fire_id("v", SPIKE), (SPIKE + 2_001) * MS)], expected)
    assert late[isolation.MISSING] == 2 and late[isolation.MET] is False
    on_time_but_one_missing = isolation.victim_figures(arrivals[:2], expected)
    assert on_time_but_one_missing[isolation.MET] is False
    assert isolation.victim_figures([], expected)[isolation.P99] is None


def test_group_figures_round_trip_through_the_spikes_figures_and_print_as_a_table():
    fast = isolation.group_figures(3, [100, 200, 300], 0, {"succeeded": 3, "failed": 0,
                                                           "expired_stale": 0})
    slow = isolation.group_figures(2, [9_000], 0, {"succeeded": 0, "failed": 1,
                                                   "expired_stale": 1, "unknown": 0})
    victim = isolation.victim_figures([], isolation.victim_slots("v", SPIKE, SPIKE + 1_000))
    spike = {"slots due": 5} | isolation.prefixed(isolation.FAST, fast) | \
        isolation.prefixed(isolation.SLOW, slow) | isolation.prefixed(isolation.VICTIM, victim)
    assert isolation.of_group(spike, isolation.FAST) == fast
    assert isolation.of_group(spike, "nobody") is None
    printed = isolation.lines({"first spike": spike, "peer": {"slots due": 1}}, ["about it"])
    assert printed[2] == "  about it"
    rows = printed[printed.index("  first spike") + 1:]
    assert len(rows) == 3 and "peer" not in "\n".join(printed)
    assert rows[0].split()[:9] == ["fast", "jobs", "3", "0", "0", "200", "300", "300", "3"]
    assert rows[1].split()[2:5] == ["2", "1", "0"] and "no ledger outcome: 0" not in rows[1]
    assert "NOT met" in rows[2] and rows[2].split()[1:4] == ["2", "2", "0"]
