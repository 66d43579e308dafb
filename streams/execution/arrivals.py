"""What a fired record that arrives at the executor means, given what is done and what runs.

Pure decision logic, apart from the executor so it can be tested without a broker. A fire id
reaches the executor more than once in two ways, and they must be told apart:

- another record of the same fire (the scheduler or the reconciler wrote it again, at another
  offset): it is redundant and acknowledged, the running or finished slot stands for it;
- the very record a running slot holds, delivered again (faust re-seeks to the committed offset
  after a rebalance, so a record fetched just before can arrive twice). It must not be
  acknowledged: that would commit the offset while the slot still runs, and a crash before the
  slot's outcome is on the ledger would then lose the slot (the fan-out walkers had the same
  bug, ``streams.campaigns.walk_registry.Start.REDELIVERED``).
"""

from __future__ import annotations

from enum import Enum

from streams.topology import INTENT, REFUSED


class Arrival(Enum):
    NEW = "new"  # never run: run it (subject to the overlap policy)
    DONE = "done"  # already has an outcome: acknowledge, do not run again
    RUNNING_COPY = "running_copy"  # another record of a running fire: acknowledge, not run
    REDELIVERED = "redelivered"  # the running slot's own record again: leave it to that slot
    UNKNOWN_SEND = "unknown_send"  # an email whose send began before a crash: record unknown
    # (a send answered "not sent" and waiting to try again is NEW: ``REFUSED`` says nothing left)


Position = tuple[int, int]  # (partition, offset) of a fired record


def classify(done: bytes | None, running_at: Position | None, here: Position) -> Arrival:
    """``done`` is the fire id's done-table value, ``running_at`` where the record of the slot
    now running for it was read (None when none runs), ``here`` where this one was read."""
    if running_at is not None:
        return Arrival.REDELIVERED if running_at == here else Arrival.RUNNING_COPY
    if done == INTENT:
        return Arrival.UNKNOWN_SEND
    if done == REFUSED:  # its last attempt left nothing and it waited to try again: run it
        return Arrival.NEW
    if done is not None:
        return Arrival.DONE
    return Arrival.NEW
