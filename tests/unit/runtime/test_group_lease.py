"""The member's lease from its own heartbeats (``streams.runtime.group_lease``), without a broker."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
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
    coordinator = SimpleNamespace(group_id="workers", coordinator_id=1, _group_instance_id=None)

    async def sent(self, request):
        if answers.get("raise"):
            raise ConnectionError("the coordinator went away")
        if answers.get("moved"):
            self.coordinator_id = 2  # the coordinator changed while the request was out
        return SimpleNamespace(error_code=answers["error_code"])

    monkeypatch.setattr(GroupCoordinator, "_send_req", sent)
    now = [5.0]
    lease = lease_at(now)
    heartbeats_renew(lease)
    heartbeats_renew(lease)  # idempotent: wraps the original once

    def send(request, by=coordinator) -> None:
        asyncio.run(GroupCoordinator._send_req(by, request))

    def beat(at: float, **answer) -> None:
        now[0] = at
        answers.clear()
        answers.update({"error_code": 0, **answer})
        send(HeartbeatRequest("workers", 7, "member-1"))

    beat(5.0)
    assert lease.holds(M)
    send(JoinGroupRequest("workers", 2000, 60000, "member-1", None, "consumer", []))
    assert not lease.holds(M), "a join may end the generation"
    beat(5.1)
    assert lease.holds(M)
    send(LeaveGroupRequest("workers", "member-1"))
    assert not lease.holds(M), "a leave ends the membership"
    beat(5.2)
    beat(5.3, error_code=27)  # REBALANCE_IN_PROGRESS: the coordinator waits for this member
    assert lease.holds(M), "a rebalance's first heartbeat neither renews nor ends it"
    beat(5.4, error_code=25)  # UNKNOWN_MEMBER_ID: the coordinator dropped this member
    assert not lease.holds(M)
    beat(5.5)
    with pytest.raises(ConnectionError):
        beat(5.6, **{"raise": True})
    assert not lease.holds(M), "a heartbeat that failed: the coordinator may have moved"
    beat(5.7, moved=True)
    assert not lease.holds(M), "answered by another coordinator than it was sent to"
    coordinator.coordinator_id = 1
    coordinator._group_instance_id = "static-1"
    beat(5.8)
    assert not lease.holds(M), "a static member can be replaced within its generation"
    coordinator._group_instance_id = None
    send(HeartbeatRequest("other-group", 7, "member-1"),
         SimpleNamespace(group_id="other-group", coordinator_id=1))
    assert not lease.holds(M), "another group's coordinator"
