"""An SES slot (``streams.campaigns.ses_slots.SesSlot``) is given back only once its chunk left it
and its call's thread finished: a walker cancelled mid-call (a revocation) must not hand its slot
to a chunk whose call would queue behind the abandoned one, its intent written meanwhile."""

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from streams.campaigns.ses_slots import SesSlot, SesSlots


def test_a_slot_left_mid_call_comes_back_only_when_the_thread_finishes():
    released: list[str] = []
    gate = threading.Event()

    async def scenario() -> None:
        with ThreadPoolExecutor(1) as pool:
            slot = SesSlot(pool, lambda: released.append("slot"))
            call = slot.start(lambda: gate.wait(5))
            await asyncio.sleep(0.05)  # the thread runs the call
            call.cancel()  # the walker revoked mid-call
            slot.leave()  # and its chunk leaves the slot
            await asyncio.sleep(0.05)
            assert released == [], "given back while its thread still runs the call"
            gate.set()
            for _ in range(100):
                if released:
                    break
                await asyncio.sleep(0.01)
    asyncio.run(scenario())
    assert released == ["slot"]


def test_a_slot_without_a_call_or_after_an_answered_one_comes_back_once():
    released: list[int] = []

    async def scenario() -> None:
        with ThreadPoolExecutor(1) as pool:
            unused = SesSlot(pool, lambda: released.append(1))
            unused.leave()
            answered = SesSlot(pool, lambda: released.append(2))
            assert await answered.start(lambda: "accepted") == "accepted"
            await asyncio.sleep(0.01)  # the thread's done callback, on the loop
            assert released == [1], "given back before the chunk left it"
            answered.leave()
    asyncio.run(scenario())
    assert released == [1, 2]


def test_a_worker_has_as_many_calls_out_as_slots_and_the_next_chunk_waits_for_one():
    async def scenario() -> list[str]:
        slots = SesSlots(2)
        order: list[str] = []
        gate = asyncio.Event()

        async def chunk(name: str) -> None:
            async with slots.slot() as slot:
                order.append(f"{name} holds")
                await gate.wait()
                await slot.start(lambda: None)
            order.append(f"{name} left")

        chunks = [asyncio.ensure_future(chunk(name)) for name in "abc"]
        await asyncio.sleep(0.05)
        assert order == ["a holds", "b holds"], "a third slot was handed out"
        gate.set()
        await asyncio.gather(*chunks)
        return order
    order = asyncio.run(scenario())
    assert order.index("c holds") > min(order.index("a left"), order.index("b left"))
