"""Send-time fencing for fan-out walkers: "does the group coordinator say I own this partition?"

A worker paused past its session timeout (SIGSTOP, a long GC, a frozen VM) wakes up believing it
still owns its partitions; until its next heartbeat tells it otherwise, its walkers would go on
sending chunks the new owner may already have sent. So a walker, after its chunk's intent is
durable and before SES is called, asks the coordinator (``DescribeConsumerGroups``) for the
group's current assignment. Only a stable group that assigns the partition to the walker's own
group *member id* (the one it was started under) lets the send go. Why the member id and not
the client id: a zombie that wakes up rejoins under the same client id, gets its partitions
back, and an old walker of its that asked then was told "yours" and sent a chunk the other
worker had sent meanwhile (fault suite, zombie scenario, fresh clone: 50 addresses mailed
twice). A rejoin after an expired session gets a new member id, so old walkers stay fenced.
Order matters: fence → intent → flush → fence → send. A zombie stopped
anywhere before the second fence finds itself fenced; one stopped after it finds its intent
resolved ``unknown`` by the new owner, which then never re-sends that chunk. The first fence
only waits out a rebalance before the intent (``streams.campaigns.walker``), so a chunk caught
by one is not resolved ``unknown`` for nothing.

Checks are shared (``streams.runtime.shared_round``): every walker waiting on a fence joins the next
``DescribeConsumerGroups`` round that *starts after* its intent was flushed, so hundreds of
walkers cost one request per round.

Asked first, and enough on its own while it holds: the member's lease from its own heartbeats
(``streams.runtime.group_lease``), which answers at once. The coordinator is asked only when the
lease does not hold (a rebalance, a coordinator moving, a zombie), so in a steady send nothing
stands between a chunk's acknowledged intent and its request but the hand-over to its thread.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from streams.runtime import admin
from streams.runtime.coordinator_child import AdminChild
from streams.runtime.group_lease import GroupLease, Member
from streams.runtime.outage_log import OutageLog
from streams.runtime.shared_round import SharedRound

log = logging.getLogger(__name__)
T = TypeVar("T")


class Ownership(enum.Enum):
    OWNED = "owned"
    NOT_OWNED = "not_owned"  # another member holds it: this process is a zombie for it
    UNSETTLED = "unsettled"  # the group is rebalancing: ask again shortly


@dataclass(frozen=True)
class Assignment:
    """What the coordinator answered: group state and, per member id, the (topic, partition)s."""

    state: str
    held: dict[str, frozenset[tuple[str, int]]]


def ownership(assignment: Assignment, member_id: str, topic: str, partition: int) -> Ownership:
    """Pure decision on one coordinator answer."""
    if assignment.state != "STABLE":
        return Ownership.UNSETTLED
    if (topic, partition) in assignment.held.get(member_id, frozenset()):
        return Ownership.OWNED
    if any((topic, partition) in tps for tps in assignment.held.values()):
        return Ownership.NOT_OWNED
    return Ownership.UNSETTLED  # nobody holds it yet: assignment still being handed out


# this process's coordinator requests go through a child process: a librdkafka abort on a
# coordinator's lost connection takes the child, not the worker (streams.runtime.coordinator_child)
_COORDINATOR = AdminChild()
CHILD_GRACE_S = 20.0  # beyond the request's own timeout: a new child's start and imports
# a coordinator answers in milliseconds; one that died with the request out answers never, and the
# fence waited the whole timeout before asking its successor (10 s of a controller kill's stall,
# docs/testing.md's timeline). Sooner is safe: a describe that times out fences nothing (retried)
DESCRIBE_TIMEOUT_S = 3.0


def describe(bootstrap: str, group: str, timeout_s: float = DESCRIBE_TIMEOUT_S) -> Assignment:
    """The coordinator's answer for ``group`` (blocking), asked from the child process; raises
    when it cannot say (the fence then waits and asks again)."""
    answer = _COORDINATOR.call(f"{__name__}:described", bootstrap, group, timeout_s,
                               timeout_s=timeout_s + CHILD_GRACE_S)
    return Assignment(answer["state"], {member: frozenset((t, p) for t, p in tps)
                                        for member, tps in answer["held"].items()})


def described(bootstrap: str, group: str, timeout_s: float) -> dict[str, Any]:
    """In the child: describe ``group`` through its AdminClient, as JSON values."""
    got = admin.call(bootstrap, lambda client: client.describe_consumer_groups(
        [group], request_timeout=timeout_s)[group].result())
    held: dict[str, set[tuple[str, int]]] = {}
    for member in got.members:
        tps = member.assignment.topic_partitions if member.assignment else []
        held.setdefault(member.member_id, set()).update((tp.topic, tp.partition) for tp in tps)
    return {"state": str(got.state).rsplit(".", 1)[-1],
            "held": {member: sorted(tps) for member, tps in held.items()}}


class GroupFence:
    """The member's lease, else shared rounds of ``describe``; ``check`` waits out rebalances and
    coordinator outages (nothing has been sent while it waits, so waiting is always safe).

    While it waits on the coordinator the lease is looked at every ``lease_poll_s``: after the
    group's coordinator moved, the member's heartbeat reaches the new one (and renews the lease)
    in about a second, while a describe round from a client with a stale view of the cluster
    waited out its whole timeout (three nodes, rolling restart: issue 42, item 2)."""

    def __init__(self, fetch: Callable[[], Assignment], lease: GroupLease | None = None,
                 retry_s: float = 0.5, warn_every_s: float = 30.0,
                 lease_poll_s: float = 0.05) -> None:
        self.fetch, self.lease = fetch, lease
        self.retry_s, self.warn_every_s, self.lease_poll_s = retry_s, warn_every_s, lease_poll_s
        self._rounds = SharedRound(lambda: self.fetch())
        self._outage = OutageLog(log, "the coordinator not answering the send fence",
                                 warn_every_s)

    def _leased(self, member: Member) -> bool:
        return self.lease is not None and self.lease.holds(member)

    async def _unless_leased(self, member: Member, awaitable: Awaitable[T]) -> T | None:
        """``awaitable``'s result, or None as soon as the member's lease holds (looked at each
        ``lease_poll_s``). A shared round goes on for its other waiters: ``SharedRound``
        shields it."""
        task = asyncio.ensure_future(awaitable)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.lease_poll_s)
                if done:
                    return task.result()
                if self._leased(member):
                    return None
        finally:
            task.cancel()

    async def check(self, topic: str, partition: int, member: Member,
                    max_age_s: float | None = None) -> Ownership:
        """OWNED or NOT_OWNED for the group member ``member``, once the group is settled: OWNED
        at once while its lease holds (the partition was assigned in ``member.generation``).
        ``max_age_s``: a first answer that old will do (``SharedRound.recent``); by default only
        a round begun after the call counts, as the fence after an intent needs."""
        loop = asyncio.get_running_loop()
        started = warned = loop.time()
        first = True
        while True:
            if self._leased(member):
                self._outage.answered(loop.time(), "the member's lease")
                return Ownership.OWNED
            try:
                answer = await self._unless_leased(member, (
                    self._rounds.recent(max_age_s) if first and max_age_s is not None
                    else self._rounds.fresh()))
            except Exception as exc:  # noqa: BLE001 - a failed describe fences nothing: retry
                self._outage.failed(loop.time(), f"{topic}[{partition}]: {exc}; sends wait for "
                                    "it or the member's lease")
                verdict = Ownership.UNSETTLED
            else:
                if answer is None:
                    self._outage.answered(loop.time(), "the member's lease")
                    return Ownership.OWNED
                self._outage.answered(loop.time(), "the coordinator")
                verdict = ownership(answer, member.id, topic, partition)
            first = False
            if verdict is not Ownership.UNSETTLED:
                return verdict
            if loop.time() - warned > self.warn_every_s:
                warned = loop.time()
                log.warning("ownership of %s[%d] unsettled for %.0fs; sends wait", topic,
                            partition, warned - started)
            # the pause before the next round, cut short by the lease (the sleep gives False)
            if await self._unless_leased(member, asyncio.sleep(self.retry_s, False)) is None:
                self._outage.answered(loop.time(), "the member's lease")
                return Ownership.OWNED
