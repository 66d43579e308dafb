"""How far the executor may commit each fired partition: only over records whose slots are
resolved for good.

The executor reads a partition's records in order but resolves them out of order (a slow
webhook's slot finishes after a hundred fast ones read behind it), and a record counts as
resolved only once what makes its redelivery harmless is durable: its done mark acknowledged
by the broker (after its ledger record was), or nothing to do at all (a fenced zombie's record,
a fire id already done). Committing past an unresolved record would lose it at the next crash:
whoever reads the partition next starts at the commit. So the commit of a partition is the
offset of its first unresolved record, or one past the last record taken when every record taken
is resolved: the contiguous resolved prefix, as Kafka Streams' and the fan-out walkers' commits
are.

``Taken`` also tells a record the executor already took from the same record read again: after
a partition is assigned anew the reader starts at the commit, and records between the commit
and what was taken before arrive a second time; they are the same records (same offsets), and
are not taken twice. Pure bookkeeping, no Kafka: tested without a broker.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class _Partition:
    next_offset: int | None  # one past the last record taken (None: nothing taken yet)
    taken: deque[int] = field(default_factory=deque)  # taken and not resolved, in offset order
    resolved: set[int] = field(default_factory=set)  # resolved, but behind an unresolved one
    committed: int | None = None  # the last offset handed out by ``committable``


class Taken:
    """The records taken from each assigned partition, and which of them are resolved."""

    def __init__(self) -> None:
        self._parts: dict[int, _Partition] = {}

    def assign(self, partition: int, start: int | None) -> None:
        """The partition is read from ``start`` (its committed offset; None: unknown, the first
        record read sets it). Whatever was taken of it before is forgotten: its records are read
        again from the commit, and a slot still running from before resolves nothing here."""
        self._parts[partition] = _Partition(start, committed=start)

    def forget(self, partition: int) -> None:
        self._parts.pop(partition, None)

    def assigned(self) -> set[int]:
        return set(self._parts)

    def take(self, partition: int, offset: int) -> bool:
        """Whether the record at ``offset`` is new to the executor: True takes it (it must be
        resolved before the commit passes it); False for a record of a partition not assigned,
        or one read before (at or below the last taken)."""
        part = self._parts.get(partition)
        if part is None or (part.next_offset is not None and offset < part.next_offset):
            return False
        part.next_offset = offset + 1
        part.taken.append(offset)
        return True

    def resolve(self, partition: int, offset: int) -> None:
        """The record's slot is resolved for good (see the module docstring). A partition
        assigned anew since the record was taken ignores it."""
        part = self._parts.get(partition)
        if part is None or not part.taken or offset < part.taken[0]:
            return
        part.resolved.add(offset)
        while part.taken and part.taken[0] in part.resolved:
            part.resolved.discard(part.taken.popleft())

    def commit_point(self, partition: int) -> int | None:
        """The offset to commit now: the first unresolved record, else one past the last taken;
        None when nothing was taken since the partition was assigned and no start is known."""
        part = self._parts.get(partition)
        if part is None:
            return None
        return part.taken[0] if part.taken else part.next_offset

    def committable(self) -> dict[int, int]:
        """Every partition whose commit point moved since it was last handed out, with it; the
        caller commits them (and a failed commit is handed out again by ``uncommitted``)."""
        moved: dict[int, int] = {}
        for partition, part in self._parts.items():
            point = part.taken[0] if part.taken else part.next_offset
            if point is not None and point != part.committed:
                moved[partition] = point
                part.committed = point
        return moved

    def uncommitted(self, partition: int, offset: int) -> None:
        """A commit of ``offset`` failed: hand the partition's point out again next time."""
        part = self._parts.get(partition)
        if part is not None and part.committed == offset:
            part.committed = None

    def position(self, partition: int) -> tuple[int | None, int]:
        """(one past the last record taken, records taken and unresolved) of a partition."""
        part = self._parts.get(partition)
        return (None, 0) if part is None else (part.next_offset, len(part.taken))
