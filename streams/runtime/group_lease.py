"""This worker's standing in the workers' group, kept from its own heartbeats: a lease that tells a
fan-out walker, without asking the coordinator, that no other member can have been given its
partition yet.

Why: a chunk's intent must be durable before its request leaves, and the send fence must say
after that intent that the partition is still this member's (``streams.campaigns.ownership``).
Asked of the coordinator (``DescribeConsumerGroups``), that answer took 14 ms at the median and
45 ms at p90 in ``bench.fanout``, after the intent's acknowledgement and before the request: a
worker killed then leaves the chunk ``unknown`` though nothing left (issue 42, item 3).

Why the lease is sound. The coordinator gives a member's partitions to another member only in a
later generation, and a later generation forms only after this member sends ``JoinGroup`` or
``LeaveGroup`` (each voids the lease here, before it is sent), or after the coordinator removed
it: its session ran out with no heartbeat received (``session_s`` after the last one), or a
rebalance waited ``rebalance_s`` for it to rejoin (begun after the last heartbeat that found the
group settled). A heartbeat the coordinator answered without an error for (member, generation),
sent at ``asked_at`` on this process's monotonic clock, therefore lets this member act for that
generation until ``asked_at + min(session_s, rebalance_s)``, less a margin of half of it (the
same arithmetic as the region's lease, ``streams.runtime.region.LeaseClock``). A zombie (paused
past its session) wakes with the lease long run out; a member that rejoined under a new generation
holds no lease for the old one; and whoever takes a partition over later recovers its table after
its assignment, so it finds every intent written before a send this lease let go.

The heartbeats are aiokafka's own (faust's consumer): ``heartbeats_renew`` wraps the group
coordinator's ``_send_req``, the one method its heartbeat, join, leave and sync requests all go
through (aiokafka 0.14; a unit test pins the names it reads). A heartbeat renews the lease only
if the same node was the coordinator when it was sent and when it was answered, and any error
but "rebalancing" (the coordinator still waits for this member then), or a failed request, ends
it at once: "unknown member", "illegal generation" or "not coordinator" say the generation or
the coordinator this lease stood on is gone. Static membership (``group.instance.id``) would
let a replacement take the member's place in the same generation: no lease is kept for one.

What it cannot see: a broker that still answers as the group's coordinator after the group has
moved (a former leader of its ``__consumer_offsets`` partition cut off from the controller)
renews it, as the same broker answered the coordinator's describe the fence relied on before.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from streams.runtime import library_patch
from streams.runtime.region import LeaseClock


@dataclass(frozen=True)
class Member:
    """A member of the workers' group in one generation: what a walker was started under."""

    id: str
    generation: int


class GroupLease:
    """The lease of this process's member in ``group``. ``renewed`` and ``void`` are called on the
    consumer's thread, ``holds`` on the event loop's."""

    def __init__(self, group: str, session_s: float, rebalance_s: float,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        span = min(session_s, rebalance_s)
        self.group, self.monotonic = group, monotonic
        self.clock = LeaseClock(span, span / 2)
        self.member_id: str | None = None
        self.voided_at = -math.inf

    def renewed(self, member: Member, asked_at: float) -> None:
        """A heartbeat sent at ``asked_at`` for ``member`` was answered without an error."""
        if asked_at <= self.voided_at:
            return  # sent before a join or a leave: it says nothing of what came after
        if (member.id, member.generation) != (self.member_id, self.clock.epoch):
            self.clock.lost()
            self.member_id = member.id
        self.clock.renewed(asked_at, member.generation)

    def void(self) -> None:
        """A join or a leave is about to be sent: the generation may end with it."""
        self.clock.lost()
        self.voided_at = self.monotonic()

    def holds(self, member: Member) -> bool:
        """Whether ``member`` is, now, certainly still this process's standing in the group."""
        return (member.id == self.member_id
                and self.clock.holds(self.monotonic()) == member.generation)


NO_ERROR, REBALANCE_IN_PROGRESS = 0, 27  # Kafka's error codes of a heartbeat's answer


def heartbeats_renew(lease: GroupLease) -> None:
    """Route the heartbeats of aiokafka's group coordinators for ``lease.group`` to ``lease``
    (idempotent: a second call only changes the lease)."""
    from aiokafka.consumer.group_coordinator import GroupCoordinator
    from aiokafka.protocol.group import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest

    original = library_patch.original(GroupCoordinator, "_send_req")

    async def _send_req(self: Any, request: Any) -> Any:
        if self.group_id != lease.group:
            return await original(self, request)
        if isinstance(request, JoinGroupRequest | LeaveGroupRequest):
            lease.void()
        heartbeat = isinstance(request, HeartbeatRequest)
        asked_at, coordinator = lease.monotonic(), self.coordinator_id
        try:
            response = await original(self, request)
        except BaseException:
            if heartbeat:
                lease.void()
            raise
        if not heartbeat:
            return response
        if response.error_code not in (NO_ERROR, REBALANCE_IN_PROGRESS):
            lease.void()
        elif (response.error_code == NO_ERROR and self.coordinator_id == coordinator
              and getattr(self, "_group_instance_id", None) is None):
            lease.renewed(Member(request._member_id, request._generation_id),  # noqa: SLF001
                          asked_at)
        return response

    library_patch.replace(GroupCoordinator, "_send_req", _send_req)
