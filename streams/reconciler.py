"""The cleanup crew: slots that were sent to run but have no decision after a trailing lag.

Seed 002's operator ran a second cron ten minutes behind the first to catch reminders that slipped
through; this is that, per partition, in memory. The scheduler registers every slot it emits to
``cronstream.fired``; any decision on the ledger resolves it. A slot still unresolved ``lag_ms``
after it was emitted (a lost record, an executor crash after its offset was committed) is
re-driven with the same fire id, so a run that did happen is not repeated (the executor's done
table), and after ``max_redrives`` or past the job's max lateness it is expired with a reason.
Every catch is logged and counted. Pure bookkeeping: the scheduler does the producing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_LAG_MS = 120_000
MAX_REDRIVES = 2


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

    def sweep(self, now_ms: int, in_flight: set[str] | frozenset[str] = frozenset()) -> list[Catch]:
        """Slots overdue for a decision, with what to do about each."""
        catches = []
        for item in list(self.pending.values()):
            if now_ms - item.emitted_ms < self.lag_ms or item.fire_id in in_flight:
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
