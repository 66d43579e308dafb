"""Which waiting slot runs next: fair between tenants, bounded per host, stale ones expired.

The fired topic is read in order, but a spike's slots must not run in that order: one tenant's
100k slots due at 09:00:00 would hold another tenant's every-second job behind them for as long
as they take to run, and a slow host would hold every slot behind the ones waiting for it. So the
executor reads ahead into a ``RunQueue`` and starts, whenever it has room, the slot this module
picks:

- tenants take turns (round robin over the tenants with slots waiting, as the campaigns' SES
  share does in ``streams.campaigns.fair_share``): a tenant with one slot waiting waits for at
  most one slot of each other tenant;
- within a tenant, its target hosts take turns, and a host with ``per_host`` runs in flight is
  passed over until one ends: a target that answers in 5 s holds its own slots back, not the
  others' (nothing is dropped: its slots wait their turn, or expire below);
- a tenant without a token of its fires-per-second quota (``streams.execution.fire_quota``) is
  passed over as a host at its limit is, until its next token (``next_token_ms``);
- a slot whose turn comes after its job's ``max_lateness_s`` is not run but expired, with the
  reason (``expired``): a spike bigger than the box can run in time ends in decisions on the
  ledger, never in silently late calls.

Pure logic: no Kafka, no clock of its own (``now_ms`` is passed in), tested without a broker.
``take`` is on the executor's hot path (every run starts through it, thousands a second): it
touches only the tenants and hosts it passes, and allocates nothing per call but their lists.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from streams.execution.fire_quota import FireQuota

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Waiting(Generic[T]):
    """A slot in the queue: what the executor needs to run it, and what the queue decides on."""

    item: T
    tenant: str
    host: str
    nominal_ms: int
    run_by_ms: int | None  # past this, the slot is expired instead of run (None: never)


def expiry_reason(waiting: Waiting[T], now_ms: int, quota_held: bool = False) -> str:
    """The ledger's reason for a slot whose turn came too late: its tenant's fires-per-second
    quota when that held the tenant while the slot waited (``RunQueue.held_by_quota``), else
    the run backlog."""
    late = now_ms - waiting.nominal_ms
    allowed = (waiting.run_by_ms or 0) - waiting.nominal_ms
    cause = ("fires-per-second quota: the tenant's max_fires_per_s held its runs"
             if quota_held else "run backlog")
    return (f"{cause}: its turn came {late} ms after its nominal time, past its "
            f"max_lateness_s={allowed // 1000}; not run")


class RunQueue(Generic[T]):
    """Slots waiting to run, taken fairly (see the module docstring)."""

    def __init__(self, per_host: int, quota: FireQuota | None = None) -> None:
        if per_host < 1:
            raise ValueError(f"per_host must be >= 1, got {per_host}")
        self.per_host = per_host
        self.quota = quota  # None: no tenant is held to a rate
        # when the next token of a tenant passed over for lack of one is due (the last ``take``
        # that found nothing to start saw every such tenant): the dispatcher wakes then
        self.next_token_ms: int | None = None
        # tenant -> host -> slots in arrival order; both levels rotate so each takes its turn
        self._tenants: OrderedDict[str, OrderedDict[str, deque[Waiting[T]]]] = OrderedDict()
        self._running: dict[str, int] = {}  # host -> runs started and not yet ended
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def tenants(self) -> list[str]:
        """The tenants with slots waiting, in the order their turns come."""
        return list(self._tenants)

    def running(self, host: str) -> int:
        return self._running.get(host, 0)

    def push(self, waiting: Waiting[T]) -> None:
        hosts = self._tenants.setdefault(waiting.tenant, OrderedDict())
        hosts.setdefault(waiting.host, deque()).append(waiting)
        self._size += 1

    def take(self, now_ms: int, max_expired: int = 1_000
             ) -> tuple[Waiting[T] | None, list[Waiting[T]]]:
        """The next slot to start (counted as running on its host until ``ended``, its tenant's
        token spent), or None if every waiting slot's host is at its limit or its tenant has no
        token (or ``max_expired`` slots were found expired first: after a stall, tens of
        thousands may be, and each is a write to resolve); and the
        slots found expired on the way, which the caller records as ``expired_stale``
        (``expiry_reason``) and never runs."""
        expired: list[Waiting[T]] = []
        quota = self.quota
        self.next_token_ms = None
        for tenant in list(self._tenants):
            if len(expired) >= max_expired:
                break
            hosts = self._tenants[tenant]
            # a tenant held by its quota starts nothing, but its stale slots (on hosts with room)
            # still expire now
            held = False
            if quota is not None and not quota.admits(tenant, now_ms):
                held = True
                due = quota.due_ms(tenant, now_ms)
                if self.next_token_ms is None or due < self.next_token_ms:
                    self.next_token_ms = due
            for host in list(hosts):
                if self._running.get(host, 0) >= self.per_host:
                    continue
                slots = hosts[host]
                chosen = None
                while slots and len(expired) < max_expired:
                    head = slots[0]
                    if head.run_by_ms is not None and now_ms > head.run_by_ms:
                        expired.append(slots.popleft())
                        self._size -= 1
                    else:
                        if not held:
                            chosen = slots.popleft()
                            self._size -= 1
                        break
                if not slots:
                    del hosts[host]
                else:
                    hosts.move_to_end(host)
                if not hosts:
                    del self._tenants[tenant]
                if chosen is not None:
                    if tenant in self._tenants:
                        self._tenants.move_to_end(tenant)
                    self._running[host] = self._running.get(host, 0) + 1
                    if quota is not None:
                        quota.spend(tenant, now_ms)
                    return chosen, expired
        return None, expired

    def not_run(self, waiting: Waiting[T]) -> None:
        """A slot ``take`` chose is not run after all (its job's overlap policy): its host's
        room and its tenant's token are given back."""
        self.ended(waiting.host)
        if self.quota is not None:
            self.quota.give_back(waiting.tenant)

    def held_by_quota(self, waiting: Waiting[T]) -> bool:
        """Whether the slot's tenant was held by its fires-per-second quota since the slot was
        due (``expiry_reason``)."""
        return self.quota is not None and self.quota.held_since(waiting.tenant,
                                                                waiting.nominal_ms)

    def ended(self, host: str) -> None:
        """A run started by ``take`` ended (however it ended): its host has room again."""
        left = self._running[host] - 1
        if left:
            self._running[host] = left
        else:
            del self._running[host]

    def oldest_nominal_ms(self) -> int | None:
        """The earliest nominal time at the head of a host's line: the backlog's age. Each line
        is in the order its slots were read, which is their nominal order but for re-driven and
        caught-up slots, so this is the age of the oldest slot to within those."""
        heads = [slots[0].nominal_ms for hosts in self._tenants.values()
                 for slots in hosts.values()]
        return min(heads) if heads else None

    def remove_if(self, gone: Callable[[T], bool]) -> list[Waiting[T]]:
        """Take out the waiting slots whose item is ``gone`` (their partition was revoked: the
        new owner reads them again) and return them."""
        removed: list[Waiting[T]] = []
        for tenant in list(self._tenants):
            hosts = self._tenants[tenant]
            for host in list(hosts):
                kept = deque(w for w in hosts[host] if not gone(w.item))
                removed.extend(w for w in hosts[host] if gone(w.item))
                if kept:
                    hosts[host] = kept
                else:
                    del hosts[host]
            if not hosts:
                del self._tenants[tenant]
        self._size -= len(removed)
        return removed
