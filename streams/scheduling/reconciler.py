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
records to run at about a thousand a second; from two minutes on, the reconciler re-drove
85,914 slots that were only waiting (and expired 37,676), each logged, on the event loop the
executor needed (``bench.failover --spike``). So a slot on a partition where the executor still
has records to take up, and has not reached those fired when the slot was, is left alone
(``behind``), and one whose outcome is recorded is resolved (``sweep``'s ``recorded``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from streams.handoff import ExecutorQueue

DEFAULT_LAG_MS = 120_000
MAX_REDRIVES = 2


def behind(emitted_ms: int, queue: ExecutorQueue | None) -> bool:
    """Whether a slot emitted at ``emitted_ms`` may still wait in the executor's queue: records
    are left to take up, and the executor has not reached those fired that late. Not a clock of
    when it last took one up: the one agent takes up the partitions' records in turns, and a
    busy event loop (the sweep itself, logging thousands of catches) left some untouched for
    longer than any such clock. A slot the executor went past undecided (a record lost or
    dropped), or one on a partition with nothing left to take up, is the reconciler's."""
    return (queue is not None and queue.fired_ms < emitted_ms
            and queue.end_offset is not None and queue.next_offset < queue.end_offset)


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
              queues: Mapping[int, ExecutorQueue] | None = None,
              recorded: Callable[[Pending], bool] | None = None) -> list[Catch]:
        """Slots overdue for a decision, with what to do about each. ``queues``: per partition,
        where the executor stands (slots still ``behind`` in its queue are left alone).
        ``recorded``: whether a slot's outcome is already recorded (the done table), asked of an
        overdue slot only: one that is has been decided, however far the ledger's observer
        trails (70 s behind a busy survivor in ``bench.failover --spike``), and is resolved;
        re-driving it only queued the run again, and expiring it wrote a second, false
        decision."""
        catches = []
        queues = queues or {}
        for item in list(self.pending.values()):
            if now_ms - item.emitted_ms < self.lag_ms or item.fire_id in in_flight:
                continue
            if behind(item.emitted_ms, queues.get(item.partition)):
                continue
            if recorded is not None and recorded(item):
                del self.pending[item.fire_id]
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
