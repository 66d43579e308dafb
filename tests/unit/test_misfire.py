import pytest

from streams.misfire import MISFIRE_THRESHOLD_MS, decide

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
