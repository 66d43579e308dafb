"""Pure policy logic: retries, overlap, fencing, pacing, the reconciler, tenants."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.adapters import tenants
from streams.campaigns.pacing import TokenBucket, walker_bucket
from streams.execution import overlap
from streams.runtime import retry
from streams.runtime.fencing import EpochFence
from streams.scheduling.reconciler import ExecutorQueue, Pending, Reconciler, behind
from streams.scheduling.schedule import fire_id, jitter_ms


@pytest.mark.parametrize("status, expected", [
    (None, True), (500, True), (503, True), (429, True), (408, True),
    (400, False), (401, False), (404, False), (410, False),
])
def test_retryable(status, expected):
    assert retry.retryable(status) is expected


@given(st.integers(1, 30), st.floats(0.01, 10), st.floats(0.01, 600), st.text(max_size=20))
def test_backoff_is_capped_jittered_and_deterministic(attempt, initial, cap, seed):
    wait = retry.backoff_s(attempt, initial, cap, seed)
    step = min(cap, initial * 2 ** (attempt - 1))
    assert step * 0.5 <= wait <= step
    assert wait == retry.backoff_s(attempt, initial, cap, seed)


def test_backoff_grows_exponentially():
    waits = [retry.backoff_s(a, 1, 1000, "f") for a in range(1, 6)]
    assert all(b > a for a, b in zip(waits, waits[1:], strict=False))


@pytest.mark.parametrize("policy, running, action", [
    ("allow", True, overlap.Action.RUN), ("skip", True, overlap.Action.SKIP),
    ("buffer_one", True, overlap.Action.BUFFER), ("skip", False, overlap.Action.RUN),
    ("buffer_one", False, overlap.Action.RUN),
])
def test_overlap(policy, running, action):
    assert overlap.decide(policy, running) is action


def test_fence_rejects_an_older_epoch_after_a_newer_one():
    fence = EpochFence()
    assert fence.admit(0, 3) and fence.admit(0, 3)
    assert fence.admit(0, 4)
    assert not fence.admit(0, 3)
    assert fence.admit(1, 1), "partitions are fenced independently"
    assert fence.rejected == 1


def test_fence_forgets_a_revoked_partition_whose_log_is_read_again():
    """After a rebalance the partition is read again from the committed offset: the old owner's
    never-executed records (epoch 3) come before the new owner's (epoch 4) and must run; a
    zombie's epoch-3 record after them is still fenced."""
    fence = EpochFence()
    assert fence.admit(0, 3) and fence.admit(0, 4)  # read up to the new owner's records
    fence.forget(0)  # revoked; the next assignment seeks back to the committed offset
    assert fence.admit(0, 3), "the old owner's backlog is legitimate"
    assert fence.admit(0, 4)
    assert not fence.admit(0, 3), "a late epoch-3 record after epoch 4 is a zombie's"


def test_token_bucket():
    bucket = TokenBucket(rate_per_s=10, burst=5)
    assert all(bucket.take(0.0) for _ in range(5))
    assert not bucket.take(0.0)
    assert bucket.wait_s(0.0) == pytest.approx(0.1)
    assert bucket.take(0.1) and not bucket.take(0.1)
    assert bucket.take(100.0, 5) and not bucket.take(100.0), "refill is capped at the burst"



def test_a_changed_rate_applies_from_the_change_on():
    bucket = TokenBucket(rate_per_s=10, burst=20)
    assert bucket.take(0.0, 20)
    bucket.set_rate(1.0, rate_per_s=100, burst=200)  # the second before refilled at 10/s
    assert bucket.tokens == 10 and bucket.take(1.1, 20) and not bucket.take(1.1, 1)
    bucket.set_rate(10.0, rate_per_s=1, burst=2)
    assert bucket.tokens == 2, "a lowered burst caps what is there at once"

def sends_per_second(rate: float, partitions: int, seconds: int, chunk: int = 50) -> list[int]:
    """Every walker of a campaign takes a chunk whenever its bucket has one (1 ms steps)."""
    buckets = [walker_bucket(rate, p, partitions, chunk) for p in range(partitions)]
    sent = [0] * seconds
    for step in range(seconds * 1000):
        for bucket in buckets:
            if bucket.take(step / 1000, chunk):
                sent[step // 1000] += chunk
    return sent


def test_walkers_keep_a_low_rate_campaign_under_its_rate_from_the_first_second():
    """50/s over 8 partitions is one 50-recipient chunk per walker every 8 s: with full buckets
    at the start all 8 walkers sent at once (400 in the first second)."""
    sent = sends_per_second(50, 8, 40)
    assert max(sent) <= 50 and sum(sent) >= 50 * 39
    assert sends_per_second(8, 8, 60)[0] <= 50, "one chunk is the least a walker can send"


def test_walkers_reach_a_high_rate_at_once():
    """Full buckets at 8,000/s sent 16,000 in the first second."""
    sent = sends_per_second(8000, 8, 5)
    assert all(8000 - 50 <= s <= 8000 + 50 for s in sent), sent


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


def test_jitter_is_fixed_per_slot_and_bounded():
    ids = [fire_id("job", s * 1000) for s in range(200)]
    delays = [jitter_ms(f, 30) for f in ids]
    assert delays == [jitter_ms(f, 30) for f in ids]
    assert all(0 <= d <= 30_000 for d in delays) and len(set(delays)) > 100
    assert jitter_ms(ids[0], 0) == 0


def test_tenant_keys_are_stored_hashed():
    record, key = tenants.new_tenant("acme")
    assert key.startswith("cs_") and len(key) > 40
    assert key not in str(record) and record["key_sha256"] == tenants.key_hash(key)
    with pytest.raises(ValueError):
        tenants.new_tenant("Bad Name!")


def test_ses_client_never_retries_by_itself():
    # a retried SendEmail after a read timeout is a second email: botocore must make 1 attempt
    from streams.adapters import ses

    client = ses.client()
    assert client.meta.config.retries["total_max_attempts"] == 1


def test_a_running_slots_own_record_delivered_again_is_never_acknowledged():
    """Acknowledging it would commit the offset while the slot still runs: a crash before its
    outcome reached the ledger would lose the slot. Another record of the same fire is redundant."""
    from streams.execution.replays import Arrival, classify
    from streams.topology import INTENT

    assert classify(None, (3, 41), (3, 41)) is Arrival.REDELIVERED
    assert classify(INTENT, (3, 41), (3, 41)) is Arrival.REDELIVERED, "its own send, not a crash's"
    assert classify(None, (3, 41), (3, 57)) is Arrival.RUNNING_COPY
    assert classify(None, (3, 41), (5, 41)) is Arrival.RUNNING_COPY
    assert classify(INTENT, None, (3, 41)) is Arrival.UNKNOWN_SEND
    assert classify(b"succeeded", None, (3, 41)) is Arrival.DONE
    assert classify(None, None, (3, 41)) is Arrival.NEW


def test_tokens_given_back_are_there_for_the_next_send_up_to_the_burst():
    bucket = TokenBucket(rate_per_s=10, burst=50, tokens=50)
    assert bucket.take(0.0, 50) and not bucket.take(0.0, 20)
    bucket.give_back(20)  # 20 of the 50 were suppressed: not sent
    assert bucket.take(0.0, 20) and not bucket.take(0.0, 1)
    bucket.give_back(500)
    assert bucket.tokens == 50, "giving back never holds more than a full bucket"
