"""Workloads and group views the fault scenarios share: a spike of one-off jobs imported in bulk,
and who holds which partition of ``cronstream.fired`` (the coordinator's own answer)."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import httpx

from streams.campaigns.ownership import Assignment, describe
from streams.topology import APP_ID, JOBS, OWNED
from tests.conftest import cluster_partitions

IMPORT_BATCH = 1_000  # jobs per POST /v1/job-imports (api.models.MAX_IMPORT)
WORKER = re.compile(r"^cronstream-(worker-\d+)-")  # streams.runtime.app.build's client id


def import_spike(api: httpx.Client, url: str, at: datetime, count: int) -> list[str]:
    """``count`` one-off jobs due at ``at``, created through the bulk import path
    (``POST /v1/job-imports``, a thousand a request); their ids."""
    job = {"schedule": {"at": at.isoformat()}, "target": {"type": "webhook", "url": url},
           "misfire": {"policy": "fire_once", "max_lateness_s": 600}}
    ids: list[str] = []
    for start in range(0, count, IMPORT_BATCH):
        done = api.post("/v1/job-imports",
                        json={"jobs": [job] * min(IMPORT_BATCH, count - start)}, timeout=120)
        assert done.status_code == 202, done.text
        ids += done.json()["created"]
    return ids


def sleep_until(when: datetime) -> None:
    """A scenario's clock: its fault lands at a planned moment of the workload."""
    time.sleep(max(0.0, (when - datetime.now(UTC)).total_seconds()))


def fired_owners(assignment: Assignment) -> dict[str, list[int]]:
    """Worker name → the partitions of ``cronstream.fired`` its executor reads: those of the
    job-keyed topics it holds as an active (``streams.topology.OWNED``; standby replicas are
    changelog partitions, not that topic's)."""
    owners: dict[str, list[int]] = {}
    for member, tps in assignment.held.items():
        match = WORKER.match(member)
        name = match.group(1) if match else member
        owners[name] = sorted(p for t, p in tps if t == OWNED.name)
    return dict(sorted(owners.items()))


def settled_owners(bootstrap: str, workers: int) -> tuple[Assignment, dict[str, list[int]]] | None:
    """The group's answer and the fired topic's owners, once it is stable with ``workers``
    members and every partition held; None before (a probe for ``wait_for``)."""
    try:
        assignment = describe(bootstrap, APP_ID)
    except Exception:  # noqa: BLE001 - a coordinator busy with the rebalance: ask again
        return None
    owners = fired_owners(assignment)
    held = sorted(p for parts in owners.values() for p in parts)
    every = list(range(JOBS.count(cluster_partitions())))
    if assignment.state != "STABLE" or len(owners) != workers or held != every:
        return None
    return assignment, owners
