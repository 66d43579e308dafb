"""A request's CPU-bound work runs off the event loop, at most ``per_tenant`` at a time per
tenant (``api.heavy``), so one tenant's costly requests neither hold the loop nor every thread."""

from __future__ import annotations

import asyncio
import threading

from api.heavy import TenantWork
from tests.waiting import loop_turns


def test_a_tenant_runs_at_most_its_share_at_once_and_others_are_not_held():
    async def scenario():
        work = TenantWork(per_tenant=2)
        release = threading.Event()
        started: list[str] = []
        two_started = threading.Event()

        def costly(who: str) -> str:
            started.append(who)
            if len(started) == 2:
                two_started.set()
            release.wait(10)
            return who

        flood = [asyncio.create_task(work.run("greedy", costly, f"greedy-{i}")) for i in range(5)]
        await loop_turns()
        assert await asyncio.to_thread(two_started.wait, 10)  # the two admitted are running
        await loop_turns()
        assert work.running("greedy") == 2 and len(started) == 2, started
        other = await asyncio.wait_for(work.run("quiet", lambda: "answered"), 10)
        assert other == "answered", "another tenant's work is not queued behind the flood"
        release.set()
        assert sorted(await asyncio.gather(*flood)) == [f"greedy-{i}" for i in range(5)]
        assert work.running("greedy") == 0

    asyncio.run(scenario())
