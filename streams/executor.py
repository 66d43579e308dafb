"""The executor: runs fired slots against their targets and records outcomes on the ledger.

    cronstream.fired ──▶ [execute_fired] ──▶ webhook ──▶ cronstream.ledger
                               │
                         table fire-outcomes (fire ids already done)

At-least-once for webhooks: a crash between the call and the ledger write re-runs the slot, and
the fire id header lets the receiver dedupe. A fired record whose fire id is already in the
``fire-outcomes`` table (a replay, a second scheduler's duplicate) is not run again.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import httpx

from streams import webhook
from streams.app import SETTINGS, WORKER_ID, app
from streams.codec import codec
from streams.emit import Emitter
from streams.ledger import job_entry
from streams.scheduler import now_ms
from streams.topology import FIRE_OUTCOMES_TABLE, FIRED, LEDGER

log = logging.getLogger(__name__)

fired_topic = app.topic(FIRED.name, key_serializer="raw", value_serializer="raw",
                        partitions=FIRED.partitions)
fire_outcomes = app.Table(FIRE_OUTCOMES_TABLE.name, key_type=bytes, value_type=bytes,
                          partitions=FIRED.partitions,
                          help=FIRE_OUTCOMES_TABLE.doc)

_emitter: Emitter | None = None
_client: httpx.AsyncClient | None = None


def _resources() -> tuple[Emitter, httpx.AsyncClient]:
    global _emitter, _client
    if _emitter is None:
        _emitter = Emitter(SETTINGS.bootstrap, f"executor-{WORKER_ID}")
    if _client is None:
        _client = httpx.AsyncClient(follow_redirects=False)
    return _emitter, _client


@app.agent(fired_topic)
async def execute_fired(stream: Any) -> Any:
    async for event in stream.events():
        fired = codec().decode(event.value)
        key = fired["fire_id"].encode()
        if fire_outcomes.get(key) is not None:
            log.info("fire %s already done; replay ignored (partition %d offset %d)",
                     fired["fire_id"], event.message.partition, event.message.offset)
            continue
        emitter, client = _resources()
        nominal = fired["nominal_ms"]
        nominal_iso = datetime.fromtimestamp(nominal / 1000, tz=UTC).isoformat()
        result = await webhook.call(client, fired["target"], fired["fire_id"], nominal_iso)
        done = now_ms()
        if not result.ok:
            log.warning("fire %s of job %s tenant %s failed: %s", fired["fire_id"],
                        fired["job_id"], fired["tenant"], result.error)
        entry = job_entry(
            fire_id=fired["fire_id"], job=fired, nominal_ms=nominal,
            decision=fired["decision"], reason=None,
            lateness_ms=max(0, fired["fired_ms"] - nominal), epoch=fired["epoch"],
            outcome="succeeded" if result.ok else "failed", attempts=1,
            status_code=result.status_code, error=result.error,
            fired_ms=fired["fired_ms"], completed_ms=done,
        )
        await emitter.send(LEDGER, fired["fire_id"], codec().encode("LedgerEntry", entry))
        fire_outcomes[key] = b"succeeded" if result.ok else b"failed"
