"""A campaign record's next revision, written to cronstream.campaigns: the one write of a
campaign's lifecycle, shared by the API's routes (create, schedule, pause, resume, cancel) and
the workers' reputation guard (``streams.campaigns.guard``), so both bump the revision and the
update time the same way. Here rather than in ``api`` because a worker may not import the API
(the layers contract in pyproject.toml)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streams.campaigns.suppressions import Sends
from streams.runtime.codec import codec
from streams.topology import CAMPAIGNS


def revised(campaign: Mapping[str, Any], now_ms: int, **changes: Any) -> dict[str, Any]:
    """``campaign`` with ``changes``, its revision bumped and ``updated_ms`` set to ``now_ms``."""
    return {**campaign, **changes, "revision": campaign["revision"] + 1, "updated_ms": now_ms}


async def write(emitter: Sends, record: Mapping[str, Any]) -> None:
    """Produce ``record`` to the campaigns topic and wait for the broker's acknowledgement."""
    await emitter.send(CAMPAIGNS, record["campaign_id"], codec().encode("Campaign", dict(record)))
