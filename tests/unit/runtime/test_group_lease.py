"""The member's lease from its own heartbeats (``streams.runtime.group_lease``), without a broker."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.protocol.group import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest

from streams.runtime.group_lease import GroupLease, Member, heartbeats_renew

M = Member("member-1", 7)


def lease_at(now: list[float], session_s: float = 2.0, rebalance_s: float = 60.0) -> GroupLease:
    return GroupLease("workers", session_s, rebalance_s, monotonic=lambda: now[0])


def test_a_heartbeat_answered_lets_the_member_act_for_half_the_session_from_its_sending():
    now = [10.0]
    lease = lease_at(now)
    assert not lease.holds(M), "no heartbeat yet"
    lease.renewed(M, asked_at=10.0)
    now[0] = 10.99
    assert lease.holds(M)
    now[0] = 11.0  # sent at 10.0: the coordinator may end the session at 12.0 at the earliest
    assert not lease.holds(M)


def test_the_shorter_of_session_and_rebalance_timeout_bounds_it():
    now = [0.0]
    lease = lease_at(now, session_s=10.0, rebalance_s=4.0)
    lease.renewed(M, asked_at=0.0)
    now[0] = 2.0
    assert not lease.holds(M)


def test_another_generation_or_member_holds_nothing():
    now = [0.0]
    lease = lease_at(now)
    lease.renewed(M, asked_at=0.0)
    assert not lease.holds(Member("member-1", 6)), "a walker of the generation before"
    assert not lease.holds(Member("member-2", 7)), "a member id this process no longer has"
    lease.renewed(Member("member-1", 8), asked_at=0.1)
    assert not lease.holds(M), "the generation moved on"
    assert lease.holds(Member("member-1", 8))


def test_a_join_or_leave_ends_it_and_a_heartbeat_sent_before_renews_nothing():
    now = [0.0]
    lease = lease_at(now)
    lease.renewed(M, asked_at=0.0)
    now[0] = 0.2
    lease.void()
    assert not lease.holds(M)
    lease.renewed(M, asked_at=0.1)  # answered after the join was sent, sent before it
    assert not lease.holds(M)
    lease.renewed(M, asked_at=0.3)
    assert lease.holds(M)


def test_aiokafkas_coordinator_renews_it_on_heartbeats_and_voids_it_on_joins_and_leaves(monkeypatch):
    """Against aiokafka's own request classes and the method its group requests go through:
    an upgrade that renames either fails here, not in a fault run."""
    answers = {"error_code": 0}

    async def sent(self, request):
        return SimpleNamespace(**answers)

    monkeypatch.setattr(GroupCoordinator, "_send_req", sent)
    now = [5.0]
    lease = lease_at(now)
    heartbeats_renew(lease)
    heartbeats_renew(lease)  # idempotent: wraps the original once
    coordinator = SimpleNamespace(group_id="workers")

    def send(request, by=coordinator) -> None:
        asyncio.run(GroupCoordinator._send_req(by, request))

    send(HeartbeatRequest("workers", 7, "member-1"))
    assert lease.holds(M)
    send(JoinGroupRequest("workers", 2000, 60000, "member-1", None, "consumer", []))
    assert not lease.holds(M), "a join may end the generation"
    now[0] = 5.1
    send(HeartbeatRequest("workers", 7, "member-1"))
    assert lease.holds(M)
    send(LeaveGroupRequest("workers", "member-1"))
    assert not lease.holds(M), "a leave ends the membership"
    now[0] = 5.2
    answers["error_code"] = 27  # REBALANCE_IN_PROGRESS: aiokafka carries on, the lease does not
    send(HeartbeatRequest("workers", 7, "member-1"))
    assert not lease.holds(M)
    answers["error_code"] = 0
    send(HeartbeatRequest("other-group", 7, "member-1"), SimpleNamespace(group_id="other-group"))
    assert not lease.holds(M), "another group's coordinator"
