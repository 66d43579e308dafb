"""Send-time fencing decisions (streams.campaigns.ownership), without a broker."""

from __future__ import annotations

import asyncio

from streams.campaigns.ownership import Assignment, GroupFence, Ownership, ownership
from streams.runtime.group_lease import GroupLease, Member

T = "cronstream.fanout"
ME = Member("me", 4)


def test_only_a_stable_group_that_gives_me_the_partition_lets_me_send():
    mine = Assignment("STABLE", {"me": frozenset({(T, 1)}), "other": frozenset({(T, 2)})})
    assert ownership(mine, "me", T, 1) is Ownership.OWNED
    assert ownership(mine, "me", T, 2) is Ownership.NOT_OWNED  # a zombie for partition 2
    assert ownership(mine, "me", T, 3) is Ownership.UNSETTLED  # nobody holds it yet
    rebalancing = Assignment("PREPARING_REBALANCE", mine.held)
    assert ownership(rebalancing, "me", T, 1) is Ownership.UNSETTLED
    assert ownership(Assignment("STABLE", {}), "me", T, 1) is Ownership.UNSETTLED


def test_fence_waits_out_a_rebalance_and_shares_rounds():
    answers = [Assignment("COMPLETING_REBALANCE", {}),
               Assignment("STABLE", {"me": frozenset({(T, 0), (T, 1)})})]
    calls = []

    def fetch() -> Assignment:
        calls.append(1)
        return answers[min(len(calls), len(answers)) - 1]

    async def scenario() -> list[Ownership]:
        fence = GroupFence(fetch, retry_s=0.01)
        return list(await asyncio.gather(*(fence.check(T, p % 2, ME) for p in range(20))))

    verdicts = asyncio.run(scenario())
    assert verdicts == [Ownership.OWNED] * 20
    assert len(calls) <= 4, "twenty walkers should share describe rounds"


def test_fence_answers_from_a_round_begun_after_the_question():
    """An answer fetched before a walker's intent was durable must not fence its send."""
    state = {"held": frozenset({(T, 0)})}

    def fetch() -> Assignment:
        return Assignment("STABLE", {"me": state["held"], "other": frozenset({(T, 5)})})

    async def scenario() -> tuple[Ownership, Ownership]:
        fence = GroupFence(fetch, retry_s=0.01)
        first = await fence.check(T, 0, ME)
        state["held"] = frozenset()  # the coordinator gave partition 0 away meanwhile
        state_other = Assignment("STABLE", {"other": frozenset({(T, 0)})})
        fence.fetch = lambda: state_other
        return first, await fence.check(T, 0, ME)

    assert asyncio.run(scenario()) == (Ownership.OWNED, Ownership.NOT_OWNED)


def test_a_failing_coordinator_is_retried_not_treated_as_ownership():
    attempts = []

    def fetch() -> Assignment:
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError("coordinator not available")
        return Assignment("STABLE", {"me": frozenset({(T, 4)})})

    assert asyncio.run(GroupFence(fetch, retry_s=0.01).check(T, 4, ME)) is Ownership.OWNED
    assert len(attempts) == 3



def test_an_admin_client_failing_request_after_request_is_replaced(monkeypatch):
    """After a broker restart a worker's AdminClient timed out on every request (the fence held
    every send, a topic view never caught up) while a new client answered at once."""
    import pytest

    from streams.runtime import admin

    # stand-ins for librdkafka's clients: the replaced ones are kept for the process's life
    # (admin._keep_forever), and real ones would log a refused connection every second to the
    # end of the test session (which buried a fault scenario's failure in CI's output)
    monkeypatch.setattr(admin, "AdminClient", lambda config: object())
    bootstrap = "127.0.0.1:1"  # never contacted: the requests below fail by themselves
    seen = []

    def failing(client):
        seen.append(client)
        raise RuntimeError("Local: Timed out")

    try:
        for _ in range(admin.STUCK_AFTER):
            with pytest.raises(RuntimeError):
                admin.call(bootstrap, failing)
        assert len({id(c) for c in seen}) == 1, "the same client until it counts as stuck"
        assert admin.call(bootstrap, lambda client: client) is not seen[0], "then a new one"
        with pytest.raises(RuntimeError):
            admin.call(bootstrap, failing)
        assert admin.call(bootstrap, lambda client: client) is seen[-1], "a success resets"
    finally:
        admin.forget_clients()


def test_a_zombie_that_rejoined_is_not_its_old_walkers_owner():
    """Fault suite, zombie scenario: the woken worker rejoined under the same client id, got its
    partitions back, and an old walker told "yours" sent a chunk already sent by the other
    worker. A rejoin after an expired session is a new member; old walkers ask for the old one."""
    rejoined = Assignment("STABLE", {"member-7": frozenset({(T, 2)}), "other": frozenset({(T, 5)})})
    assert ownership(rejoined, "member-5", T, 2) is Ownership.NOT_OWNED
    assert ownership(rejoined, "member-7", T, 2) is Ownership.OWNED


def test_a_lease_that_holds_answers_at_once_and_one_that_does_not_asks_the_coordinator():
    """The fence after a chunk's intent costs no describe round while the member's heartbeats
    keep its lease (``streams.runtime.group_lease``); a walker of another generation, or one
    whose lease ran out, is answered by the coordinator as before."""
    now = [100.0]
    lease = GroupLease("g", session_s=2.0, rebalance_s=60.0, monotonic=lambda: now[0])
    lease.renewed(ME, asked_at=100.0)
    asked = []

    def fetch() -> Assignment:
        asked.append(1)
        return Assignment("STABLE", {"other": frozenset({(T, 0)})})

    async def check(member: Member) -> Ownership:
        return await GroupFence(fetch, lease, retry_s=0.01).check(T, 0, member)

    assert asyncio.run(check(ME)) is Ownership.OWNED
    assert asked == [], "the coordinator was asked though the lease held"
    assert asyncio.run(check(Member("me", 3))) is Ownership.NOT_OWNED, "an older generation's walker"
    now[0] = 101.0  # half the session after the heartbeat was sent: the lease has run out
    assert asyncio.run(check(ME)) is Ownership.NOT_OWNED
    assert len(asked) == 2


def test_a_lease_renewed_while_a_describe_round_hangs_answers_without_waiting_for_the_round():
    """After the group's coordinator moved, the heartbeat renewed the lease within a second
    while the fence's describe round, from a client with a stale view, waited out its timeout:
    sending stalled that long (issue 42, item 2). The round is not waited for once the lease
    holds, and it goes on unharmed for whoever else waits on it."""
    import threading

    now = [100.0]
    lease = GroupLease("g", session_s=2.0, rebalance_s=60.0, monotonic=lambda: now[0])
    asking, release = threading.Event(), threading.Event()

    def hanging() -> Assignment:
        asking.set()
        release.wait(30)
        return Assignment("STABLE", {"me": frozenset({(T, 0)})})

    async def scenario() -> Ownership:
        fence = GroupFence(hanging, lease, retry_s=0.01, lease_poll_s=0.01)
        checking = asyncio.ensure_future(fence.check(T, 0, ME))
        await asyncio.get_running_loop().run_in_executor(None, asking.wait, 30)
        assert not checking.done(), "answered before the lease or the round could say"
        lease.renewed(ME, asked_at=now[0])  # the heartbeat reached the new coordinator
        verdict = await asyncio.wait_for(checking, 10)
        release.set()
        return verdict

    assert asyncio.run(scenario()) is Ownership.OWNED
