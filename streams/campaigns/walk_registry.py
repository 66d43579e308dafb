"""The registry of a process's live walks: at most one live walker per (campaign, recipient
partition), through rebalances. (The walker itself, an order's sends and a chunk's commit
protocol, is ``streams.campaigns.walker``; this module only decides whether a walk may start.)

Why a registry at all: faust redelivers a fan-out order every time its partition is assigned, and
with eager rebalancing *every* partition is revoked and re-assigned on each rebalance, usually back
to the same worker a moment later. The revoked walker has been cancelled but may still be winding
down (its ``consume()`` call runs on a thread for up to a second before the consumer can close).

Two tempting answers are both wrong:

- acknowledging the redelivered order as a duplicate of the dying walker commits the order while
  nobody walks it: that partition's recipients are never sent and the campaign stalls;
- starting a second walker beside the dying one lets two walkers work one chunk table at once.

So a redelivered order *waits* for every predecessor of its key to finish, then walks from the
chunk table (done chunks skipped, a chunk caught mid-send resolved ``unknown``). Only an order
arriving while a live, un-revoked walker holds the key is a true duplicate (a controller that
retried its fan-out), and only that one is acknowledged and dropped.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable

Key = tuple[str, int]  # (campaign id, recipient partition)


class Fenced(Exception):
    """This process no longer owns the partition it walks: a zombie must not send."""


def stop_if_cancelled() -> None:
    """Raise ``CancelledError`` if this task was asked to stop. Why: Python 3.11's
    ``asyncio.wait_for`` can swallow a cancellation that arrives as the awaited future completes
    (CPython gh-86296), and faust's producer flush (how the intent was awaited until 3cdef64)
    awaits through it, so a chunk cancelled with its walker went on towards the send (the
    ownership fence caught it). The request stays
    counted on the task (``Task.cancelling``), so the steps that matter can honour it."""
    if cancel_requested():
        raise asyncio.CancelledError


def cancel_requested() -> bool:
    """Whether the current task was asked to stop, even if an await swallowed the request."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def first_failure(group: BaseExceptionGroup[Exception]) -> Exception:
    """The exception a walker acts on when several of its chunks in flight failed together: a
    ``Fenced`` one first (a zombie must stop, not walk again), else the first."""
    leaves = _leaves(group)
    return next((exc for exc in leaves if isinstance(exc, Fenced)), leaves[0])


def _leaves(group: BaseExceptionGroup[Exception]) -> list[Exception]:
    out: list[Exception] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


class Start(enum.Enum):
    STARTED = "started"  # nothing else held the key
    QUEUED = "queued"  # revoked predecessors still winding down: walks once they finish
    DUPLICATE = "duplicate"  # a live walker holds the key for another order: this one is redundant
    REDELIVERED = "redelivered"  # the very order a live walker holds, delivered again


class Walkers:
    def __init__(self) -> None:
        self._tasks: dict[Key, list[asyncio.Task[None]]] = {}
        self._offsets: dict[asyncio.Task[None], int] = {}  # walker -> offset of its order

    def start(self, key: Key, walk: Callable[[], Awaitable[None]], offset: int) -> Start:
        """Run ``walk`` for the order at ``offset`` unless a live walker already holds ``key``.

        A live walker's own order delivered again (faust re-seeks to the committed offset after
        a rebalance, so an order fetched just before can arrive twice) is REDELIVERED: it must
        not be acknowledged, because acknowledging it commits the order while its walker is
        still walking, and a revocation before the walker ends then loses the rest of the
        partition (seen in the fault suite's zombie scenario: a campaign stalled)."""
        pending = [task for task in self._tasks.get(key, []) if not task.done()]
        live = [task for task in pending if not task.cancelling()]
        if live:
            held = {self._offsets.get(task) for task in live}
            return Start.REDELIVERED if offset in held else Start.DUPLICATE
        task = asyncio.ensure_future(self._after(pending, walk))
        self._offsets[task] = offset
        task.add_done_callback(lambda done: self._offsets.pop(done, None))
        self._tasks[key] = [*pending, task]
        return Start.QUEUED if pending else Start.STARTED

    @staticmethod
    async def _after(previous: list[asyncio.Task[None]],
                     walk: Callable[[], Awaitable[None]]) -> None:
        if previous:
            await asyncio.wait(previous)
        await walk()

    def revoke(self, partition: int) -> list[Key]:
        """Cancel every walker of ``partition``; the keys whose walkers were still running."""
        stopped: list[Key] = []
        for key, tasks in list(self._tasks.items()):
            live = [task for task in tasks if not task.done()]
            if not live:
                del self._tasks[key]
                continue
            self._tasks[key] = live
            if key[1] == partition:
                for task in live:
                    task.cancel()
                stopped.append(key)
        return stopped
