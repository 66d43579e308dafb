"""A view is started once however many tasks ask for it at the same time
(``streams.runtime.topic_view.StartedOnce``): a webhook spike's first round asked the executor for
the tenants' allow-lists from every slot in flight, and each started its own consumer."""

from __future__ import annotations

import asyncio
import threading

from streams.execution.targets import TenantRecords


class SlowView:
    """A view whose start blocks its thread until released, like catching up on a topic."""

    made = 0

    def __init__(self, release: threading.Event) -> None:
        SlowView.made += 1
        self.release = release

    def start(self) -> SlowView:
        self.release.wait(10)
        return self

    def get(self, tenant: str) -> dict | None:
        return {"allowed_targets": ["127.0.0.1"]} if tenant == "t1" else None


def test_a_spikes_first_round_starts_one_tenants_view():
    SlowView.made = 0
    release = threading.Event()

    async def main() -> list[list[str]]:
        records = TenantRecords(lambda: SlowView(release))
        asking = [asyncio.ensure_future(records.allowed("t1")) for _ in range(64)]
        await asyncio.sleep(0)  # every caller has asked (and waits) before the view is ready
        release.set()
        return await asyncio.gather(*asking)

    answers = asyncio.run(main())
    assert SlowView.made == 1
    assert answers == [["127.0.0.1"]] * 64
