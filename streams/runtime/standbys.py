"""How far this worker's standby replicas trail their changelogs.

A standby (``table_standby_replicas``) is only as good as it is current: a takeover replays
whatever part of the changelog the standby has not read yet, ≈ 7k records a second, before the
new owner can fire. After a million jobs were loaded the standbys trailed by tens of thousands
of records for a while (they are read after the worker's own partitions), so this is exported
(``cronstream_standby_behind_records``) for operators, and the failover benchmark waits for it
to reach zero before it kills a worker.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from faust.assignor import PartitionAssignor

from streams.topology import APP_ID, TABLES


def behind(app: Any) -> dict[str, int]:
    """Records not yet read by this worker's standbys, per changelog topic (0 when current)."""
    recovery = app.tables.recovery
    assigned = app.consumer.assignment()
    trailing: dict[str, int] = {}
    for tp in recovery.standby_tps:
        if tp not in assigned:  # mid-rebalance the recovery's set is stale; aiokafka asserts
            continue
        end = app.consumer.highwater(tp)  # the next offset; None before the first fetch
        if end is None:
            continue
        seen = recovery.standby_offsets.get(tp)
        last = -1 if seen is None else seen
        trailing[tp.topic] = trailing.get(tp.topic, 0) + max(0, end - 1 - last)
    return trailing


def kept(standbys: Mapping[str, Sequence[int]], topics: Collection[str]) -> dict[str, list[int]]:
    """A member's standby assignment without the changelogs of tables that have no standby."""
    return {topic: list(parts) for topic, parts in standbys.items() if topic in topics}


class StandbyAssignor(PartitionAssignor):  # type: ignore[misc]
    """faust's assignor, with standby replicas only for the tables ``streams.topology`` marks
    ``standby``: faust gives every table the same ``table_standby_replicas``, and a standby of a
    campaign's per-chunk marks cost the fan-out 15-25 % without shortening a scheduler takeover.
    Filtered on the group leader before the assignment is sent, so every member agrees."""

    standby_changelogs = frozenset(table.changelog(APP_ID) for table in TABLES if table.standby)

    def _protocol_assignments(self, assignments: Any, *args: Any) -> Any:
        for assignment in assignments.values():
            assignment.standbys = kept(assignment.standbys, self.standby_changelogs)
        return super()._protocol_assignments(assignments, *args)
