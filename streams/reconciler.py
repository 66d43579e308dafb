"""The cleanup crew: slots that were sent to run but have no decision after a trailing lag.

Seed 002's operator ran a second cron ten minutes behind the first to catch reminders that slipped
through; this is that, per partition, in memory. The scheduler registers every slot it emits to
``cronstream.fired``; any decision on the ledger resolves it. A slot still unresolved ``lag_ms``
after it was emitted (a lost record, an executor crash after its offset was committed) is
re-driven with the same fire id, so a run that did happen is not repeated (the executor's done
table), and after ``max_redrives`` or past the job's max lateness it is expired with a reason.
Every catch is logged and counted. Pure bookkeeping: the scheduler does the producing.

A slot whose record is still queued for the executor is not overdue, only behind a backlog.
After a worker died in the middle of a 100k-slot spike, its survivor had some 80,000 fired
records to run at about a thousand a second; at two minutes the reconciler re-drove every slot
still waiting, 85,914 more fired records into the same queue, each logged, on the event loop
the executor needed (``bench.failover --spike``). So a partition on which the executor is busy
taking up records fired before a slot was emitted holds that slot's sweep back (``behind``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

DEFAULT_LAG_MS = 120_000
MAX_REDRIVES = 2
BUSY_MS = 10_000  # an executor that took up a record this recently is still working a queue


class TakenUp(NamedTuple):
    """The fired record an executor last took up on a partition."""

    fired_ms: int  # when it was fired: records of a partition are fired in order
    at_ms: int  # when the executor took it up


def behind(item_emitted_ms: int, taken_up: TakenUp | None, now_ms: int) -> bool:
    """Whether a slot emitted at ``item_emitted_ms`` may still be waiting in the executor's queue:
    the executor is busy on its partition and has not reached records fired that late. An idle
    executor, or one past the slot's emission, has had the chance to read it: a slot still
    undecided then was lost or dropped, and is the reconciler's."""
    return (taken_up is not None and taken_up.fired_ms < item_emitted_ms
            and now_ms - taken_up.at_ms < BUSY_MS)


@dataclass(slots=True)  # one per fired slot: slots make it cheaper to make in a spike's second
class Pending:
    fire_id: str
    job_id: str
    partition: int
    nominal_ms: int
    emitted_ms: int
    max_lateness_ms: int
    redrives: int = 0


@dataclass
class Catch:
    pending: Pending
    action: str  # "redrive" | "expire"
    reason: str


@dataclass
class Reconciler:
    lag_ms: int = DEFAULT_LAG_MS
    max_redrives: int = MAX_REDRIVES
    pending: dict[str, Pending] = field(default_factory=dict)
    caught: dict[str, int] = field(default_factory=lambda: {"redrive": 0, "expire": 0})

    def expect(self, item: Pending) -> None:
        self.pending.setdefault(item.fire_id, item)

    def resolve(self, fire_id: str) -> None:
        self.pending.pop(fire_id, None)

    def drop_partition(self, partition: int) -> None:
        for fire_id in [f for f, p in self.pending.items() if p.partition == partition]:
            del self.pending[fire_id]

    def sweep(self, now_ms: int, in_flight: set[str] | frozenset[str] = frozenset(),
              taken_up: Mapping[int, TakenUp] | None = None) -> list[Catch]:
        """Slots overdue for a decision, with what to do about each. ``taken_up``: per partition,
        the record the executor last took up (slots still ``behind`` it are left alone)."""
        catches = []
        taken_up = taken_up or {}
        for item in list(self.pending.values()):
            if now_ms - item.emitted_ms < self.lag_ms or item.fire_id in in_flight:
                continue
            if behind(item.emitted_ms, taken_up.get(item.partition), now_ms):
                continue
            late = now_ms - item.nominal_ms
            if item.redrives >= self.max_redrives or late > item.max_lateness_ms:
                del self.pending[item.fire_id]
                why = (f"no outcome after {item.redrives} re-drives" if late <= item.max_lateness_ms
                       else f"no outcome and {late} ms late exceeds max lateness")
                catches.append(Catch(item, "expire", f"reconciler: {why}"))
            else:
                item.redrives += 1
                item.emitted_ms = now_ms
                catches.append(Catch(item, "redrive",
                                     f"reconciler: no decision {self.lag_ms} ms after emission"))
            self.caught[catches[-1].action] += 1
        return catches
