"""A redelivered fan-out order after a rebalance is walked (never dropped) and never walked beside
its revoked predecessor; only an order a live walker already holds is a duplicate."""

from __future__ import annotations

import asyncio

from streams.campaigns.walk_registry import Fenced, Start, Walkers, first_failure, stop_if_cancelled
from tests.waiting import loop_turns


class Walk:
    """A walker that records when it ran and can be held inside a 'thread' after cancellation,
    like ``_walk_range`` awaiting its in-flight ``consume()`` before closing its consumer."""

    def __init__(self, log: list[str], name: str, release: asyncio.Event | None = None) -> None:
        self.log, self.name, self.release = log, name, release

    async def __call__(self) -> None:
        self.log.append(f"{self.name} start")
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if self.release is not None:  # winding down: the consume() thread is still running
                await self.release.wait()
            self.log.append(f"{self.name} stopped")
            return
        self.log.append(f"{self.name} done")


def run(coro):  # noqa: ANN001, ANN201 - test helper
    return asyncio.run(coro)


def test_order_redelivered_while_revoked_walker_winds_down_is_walked_after_it() -> None:
    async def scenario() -> list[str]:
        log: list[str] = []
        walkers, release = Walkers(), asyncio.Event()
        assert walkers.start(("c", 3), Walk(log, "old", release), 1) is Start.STARTED
        await asyncio.sleep(0)
        assert walkers.revoke(3) == [("c", 3)]
        await asyncio.sleep(0)
        assert walkers.start(("c", 3), Walk(log, "new"), 2) is Start.QUEUED
        await loop_turns()
        assert log == ["old start"], "the new walker must not run beside the dying one"
        release.set()
        await loop_turns()
        walkers.revoke(3)
        await asyncio.sleep(0)
        return log

    assert run(scenario()) == ["old start", "old stopped", "new start", "new stopped"]


def test_order_arriving_while_a_live_walker_holds_it_is_a_duplicate() -> None:
    async def scenario() -> tuple[Start, list[str]]:
        log: list[str] = []
        walkers = Walkers()
        walkers.start(("c", 1), Walk(log, "first"), 3)
        await asyncio.sleep(0)
        again = walkers.start(("c", 1), Walk(log, "second"), 4)
        walkers.revoke(1)
        await asyncio.sleep(0)
        return again, log

    again, log = run(scenario())
    assert again is Start.DUPLICATE
    assert log == ["first start", "first stopped"]


def test_the_live_walkers_own_order_delivered_again_is_left_to_it() -> None:
    """faust's re-seek after a rebalance can deliver the same order record twice; acknowledging
    the second copy would commit the order while its walker still walks."""
    async def scenario() -> tuple[Start, Start]:
        log: list[str] = []
        walkers = Walkers()
        walkers.start(("c", 1), Walk(log, "first"), 7)
        await asyncio.sleep(0)
        again = walkers.start(("c", 1), Walk(log, "copy"), 7)
        other = walkers.start(("c", 1), Walk(log, "retry"), 8)
        walkers.revoke(1)
        await asyncio.sleep(0)
        return again, other

    assert run(scenario()) == (Start.REDELIVERED, Start.DUPLICATE)


def test_revoking_a_queued_walker_still_keeps_the_next_one_behind_the_oldest() -> None:
    async def scenario() -> list[str]:
        log: list[str] = []
        walkers, release = Walkers(), asyncio.Event()
        walkers.start(("c", 0), Walk(log, "a", release), 5)
        await asyncio.sleep(0)
        walkers.revoke(0)
        walkers.start(("c", 0), Walk(log, "b"), 6)  # queued behind a
        walkers.revoke(0)  # b is revoked before it ever ran
        await asyncio.sleep(0)
        assert walkers.start(("c", 0), Walk(log, "c"), 7) is Start.QUEUED  # a still winds down
        await loop_turns()
        assert log == ["a start"]
        release.set()
        await loop_turns()
        walkers.revoke(0)
        await asyncio.sleep(0)
        return log

    assert run(scenario()) == ["a start", "a stopped", "c start", "c stopped"]


def test_revoke_touches_only_its_partition() -> None:
    async def scenario() -> tuple[list[tuple[str, int]], list[str]]:
        log: list[str] = []
        walkers = Walkers()
        walkers.start(("c", 0), Walk(log, "p0"), 8)
        walkers.start(("c", 1), Walk(log, "p1"), 9)
        await asyncio.sleep(0)
        stopped = walkers.revoke(1)
        await asyncio.sleep(0)
        walkers.revoke(0)
        await asyncio.sleep(0)
        return stopped, log

    stopped, log = run(scenario())
    assert stopped == [("c", 1)]
    assert log.index("p1 stopped") < log.index("p0 stopped")


def test_a_fenced_chunk_decides_for_the_whole_walker() -> None:
    """Chunks in flight fail together: if one of them was fenced the walker must stop (not walk
    again from the chunk table, which a zombie must not do)."""
    broker = ConnectionError("broker hiccup")
    fenced = Fenced("partition 3 belongs to another worker")
    group = ExceptionGroup("chunks", [broker, ExceptionGroup("nested", [fenced])])
    assert first_failure(group) is fenced
    assert first_failure(ExceptionGroup("chunks", [broker])) is broker


def test_a_chunk_whose_cancellation_was_swallowed_stops_before_the_send() -> None:
    """An await that swallows the cancellation (as 3.11's ``wait_for`` can, inside faust's
    producer flush) returns normally; the chunk must still not go on to send."""
    sent: list[str] = []

    async def flush_that_swallows() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            return

    async def chunk(name: str) -> None:
        await flush_that_swallows()
        stop_if_cancelled()
        sent.append(name)

    async def scenario() -> asyncio.Task[None]:
        cancelled = asyncio.create_task(chunk("cancelled"))
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.gather(cancelled, return_exceptions=True)
        stop_if_cancelled()  # a task nobody cancelled goes on
        return cancelled

    assert run(scenario()).cancelled() and sent == []
