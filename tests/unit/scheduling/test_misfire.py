import pytest

from streams.scheduling.misfire import MISFIRE_THRESHOLD_MS, decide, fired_until

NOW = 1_000_000_000


def run(slot, following=None, policy="fire_once", max_lateness_s=3600, paused=False):
    return decide(slot_ms=slot, following_slot_ms=following, now_ms=NOW, policy=policy,
                  max_lateness_s=max_lateness_s, paused=paused)


def test_on_time_slot_fires():
    verdict = run(NOW - 200)
    assert verdict.decision == "fired" and verdict.runs and verdict.lateness_ms == 200


def test_paused_job_records_a_skip():
    assert run(NOW, paused=True).decision == "skipped_paused"


def test_slot_beyond_max_lateness_expires_whatever_the_policy():
    for policy in ("fire_once", "fire_all", "skip"):
        verdict = run(NOW - 7200_000, policy=policy)
        assert verdict.decision == "expired_stale" and not verdict.runs
        assert "max_lateness_s=3600" in verdict.reason


@pytest.mark.parametrize("policy, following, expected", [
    ("fire_all", NOW - 10_000, "missed_caught_up"),
    ("fire_once", NOW - 10_000, "skipped_policy"),  # a later missed slot will run instead
    ("fire_once", NOW + 10_000, "missed_caught_up"),  # the latest missed slot runs
    ("fire_once", None, "missed_caught_up"),
    ("skip", None, "skipped_policy"),
])
def test_misfire_policies(policy, following, expected):
    late = NOW - MISFIRE_THRESHOLD_MS - 60_000
    assert run(late, following=following, policy=policy).decision == expected


from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@given(
    period_s=st.integers(1, 600),
    missed=st.integers(1, 300),
    late_ms=st.integers(0, 10_000_000),
    max_lateness_s=st.integers(1, 86_400),
    policy=st.sampled_from(["fire_once", "fire_all", "skip"]),
)
def test_catch_up_decides_every_missed_slot_once_by_policy(period_s, missed, late_ms,
                                                           max_lateness_s, policy):
    """A worker back after an outage walks the missed slots in order, as the scheduler does."""
    now = 10_000_000_000
    newest = now - late_ms
    slots = [newest - i * period_s * 1000 for i in reversed(range(missed))]
    verdicts = [decide(slot_ms=slot, following_slot_ms=slots[i + 1] if i + 1 < len(slots) else
                       None, now_ms=now, policy=policy, max_lateness_s=max_lateness_s, paused=False)
                for i, slot in enumerate(slots)]
    for slot, verdict in zip(slots, verdicts, strict=True):
        if now - slot > max_lateness_s * 1000:
            assert verdict.decision == "expired_stale"
        elif not verdict.runs:  # not paused: a slot not run is the policy's, and says so
            assert verdict.decision == "skipped_policy" and policy in verdict.reason, verdict
    runs = [v for v in verdicts if v.runs]
    fresh = [s for s in slots if now - s <= max_lateness_s * 1000]
    if policy == "fire_all":
        assert len(runs) == len(fresh)
    elif policy == "fire_once":
        on_time = [s for s in fresh if now - s <= MISFIRE_THRESHOLD_MS]
        assert len(runs) == (1 if fresh else 0) + max(0, len(on_time) - 1)
    else:
        assert all(v.decision in ("fired",) for v in runs)
        assert len(runs) == len([s for s in fresh if now - s <= MISFIRE_THRESHOLD_MS])


def test_max_lateness_below_the_misfire_threshold_still_expires():
    # regression (found by the property above): a 2 s-late slot of a job allowing 1 s ran
    assert run(NOW - 2000, max_lateness_s=1).decision == "expired_stale"


def test_fired_until_is_exactly_where_decide_stops_firing():
    """The scheduler's spike lane trusts ``fired_until`` instead of calling ``decide``: the two
    must agree at every moment, for every policy, lateness allowance and pause state."""
    slot = 1_800_000_000_000
    for policy in ("skip", "fire_once", "fire_all"):
        for max_lateness_s in (0, 1, 3, 5, 6, 60):
            for paused in (False, True):
                until = fired_until(slot_ms=slot, max_lateness_s=max_lateness_s, paused=paused)
                for late in range(0, MISFIRE_THRESHOLD_MS + 2_000, 250):
                    for now in (slot + late - 1, slot + late, slot + late + 1):
                        fired = decide(slot_ms=slot, following_slot_ms=slot + 60_000, now_ms=now,
                                       policy=policy, max_lateness_s=max_lateness_s,
                                       paused=paused).decision == "fired"
                        assert fired == (until is not None and now <= until), (
                            policy, max_lateness_s, paused, now - slot)
