"""Operator endpoints: health for orchestrators, lag and metrics for monitoring.

``/healthz`` and ``/readyz`` are what docker-compose and Kubernetes probe; ``/metrics`` is
scraped by Prometheus (lag gauges read from Kafka at scrape time, cached ``LAG_CACHE_S``);
``/metrics`` and ``/v1/ops/lag`` (with the workers' run backlog: fired slots not yet resolved,
and the oldest's age) need the operator key (``CRONSTREAM_OPERATOR_KEY``), never a tenant's
key: consumer lag tells about every tenant's traffic (``/metrics`` needed none before issue 40;
Prometheus sends the key as ``authorization: {credentials: ...}``). ``/readyz`` answers anyone
(probes carry no key) from a result at most ``READY_CACHE_S`` old, so probes cannot make the API
ask the brokers more often than that; the details (group, workers, partitions, replication)
only to the operator key.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.concurrency import run_in_threadpool
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from api.state import api_state
from ops import lag, replication
from streams.campaigns import ownership
from streams.runtime.admin import client as admin_client
from streams.runtime.admin import replication_shortfall
from streams.topology import APP_ID, FANOUT, FIRED, OWNED, consumer_group

T = TypeVar("T")
log = logging.getLogger(__name__)
LAG_CACHE_S = 5.0
READY_CACHE_S = 2.0  # /readyz asks the brokers at most this often, however many probes come
# every partition of these must be held by a worker for the system to be able to fire and send
# (each worker's readers take the jobs and fired partitions of the job partitions it holds)
MUST_BE_ASSIGNED = (OWNED, FANOUT)


def is_operator(request: Request) -> bool:
    """Whether the request carries the operator key (and one is configured)."""
    expected = api_state(request).conf.operator_key
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    return bool(expected) and scheme.lower() == "bearer" and hmac.compare_digest(
        key.strip(), expected or "")


class Cached:
    """One call of ``fn`` per ``ttl_s`` however many ask; concurrent askers share it."""

    def __init__(self, fn: Callable[[], T], ttl_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.fn, self.ttl_s, self._clock = fn, ttl_s, clock
        self._lock = threading.Lock()
        self._at: float | None = None
        self._value: T | None = None

    def get(self) -> T:
        with self._lock:
            if self._at is None or self._clock() - self._at > self.ttl_s:
                self._value, self._at = self.fn(), self._clock()
            return self._value  # type: ignore[return-value]


def _operator(request: Request) -> None:
    expected = api_state(request).conf.operator_key
    if not expected:
        raise HTTPException(403, detail="operator endpoints are disabled: set "
                                        "CRONSTREAM_OPERATOR_KEY for the API")
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(key.strip(), expected):
        raise HTTPException(401, detail="operator endpoints need Authorization: Bearer "
                                        "<operator key>", headers={"WWW-Authenticate": "Bearer"})


class LagCache:
    """One Kafka read per ``LAG_CACHE_S`` however many scrapes and calls arrive."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._lock = threading.Lock()
        self._at = 0.0
        self._rows: list[lag.PartitionLag] = []

    def rows(self) -> list[lag.PartitionLag]:
        with self._lock:
            if time.monotonic() - self._at > LAG_CACHE_S:
                self._rows = lag.read(self.bootstrap)
                self._at = time.monotonic()
            return self._rows


class LagCollector:
    """Prometheus collector: lag gauges computed when scraped."""

    def __init__(self, cache: LagCache) -> None:
        self.cache = cache

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["group", "topic", "partition"]
        offsets = GaugeMetricFamily("cronstream_consumer_lag", "Records behind the end offset",
                                    labels=labels)
        seconds = GaugeMetricFamily("cronstream_consumer_lag_seconds",
                                    "Age of the oldest unprocessed record", labels=labels)
        for row in self.cache.rows():
            key = [row.group, row.topic, str(row.partition)]
            if row.lag is not None:
                offsets.add_metric(key, row.lag)
            if row.time_lag_s is not None:
                seconds.add_metric(key, row.time_lag_s)
        yield offsets
        yield seconds


class ReplicationCollector:
    """Prometheus collector: MirrorMaker 2's lag from this region to the standby (docs/regions.md),
    read at most once per ``LAG_CACHE_S``; nothing while the standby cannot be read."""

    def __init__(self, bootstrap: str, standby: str, source: str) -> None:
        self.rows = Cached(lambda: _replication_rows(bootstrap, standby, source), LAG_CACHE_S)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["topic", "partition"]
        records = GaugeMetricFamily("cronstream_replication_lag_records", "Records of this "
                                    "region not yet copied to the standby", labels=labels)
        seconds = GaugeMetricFamily("cronstream_replication_lag_seconds", "Age of the oldest "
                                    "record not yet copied to the standby", labels=labels)
        for row in self.rows.get():
            key = [row.topic, str(row.partition)]
            records.add_metric(key, row.lag)
            if row.time_lag_s is not None:
                seconds.add_metric(key, row.time_lag_s)
        yield records
        yield seconds


def _replication_rows(bootstrap: str, standby: str, source: str) -> list[replication.ReplicationLag]:
    try:
        return replication.read(bootstrap, standby, source, timeout_s=3)
    except Exception:  # noqa: BLE001 - the standby away: no gauges rather than a failed scrape
        log.warning("replication lag to %s not read", standby, exc_info=True)
        return []


def readiness(bootstrap: str) -> tuple[bool, dict[str, Any]]:
    """Broker reachable, the workers' group stable, every partition of the topics that fire
    and send held by a worker. (Each worker's own ``/readyz`` covers its table recovery.)"""
    admin = admin_client(bootstrap)
    try:
        metadata = admin.list_topics(timeout=3)
        # from the child process the walkers' fence asks through: a probe during a broker's
        # outage is when librdkafka's coordinator-request abort strikes (streams.runtime.coordinator_child)
        group = ownership.describe(bootstrap, APP_ID, timeout_s=3)
    except Exception as exc:  # noqa: BLE001 - any failure here means "not ready", with the reason
        return False, {"broker": f"unreachable: {exc}"}
    held = set().union(*group.held.values())
    missing = [f"{t.name}[{p}]" for t in MUST_BE_ASSIGNED if t.name in metadata.topics
               for p in metadata.topics[t.name].partitions if (t.name, p) not in held]
    ok = group.state == "STABLE" and not missing and bool(group.held)
    return ok, {"broker": "ok", "group": APP_ID, "group_state": group.state,
                "workers": len(group.held), "unassigned": missing[:20],
                "replication": _replication(bootstrap)}


SHORTFALL_TTL_S = 60.0  # describing every topic's config on each probe would be a load of its own
_shortfall: dict[str, tuple[float, list[str] | str]] = {}


def _replication(bootstrap: str) -> list[str] | str:
    """Topics replicated below the setting (``admin.replication_shortfall``), or "ok": shown,
    not failing the probe (an operator's reassignment fixes it; an outage would not)."""
    cached = _shortfall.get(bootstrap)
    if cached is not None and time.monotonic() - cached[0] < SHORTFALL_TTL_S:
        return cached[1]
    try:
        found: list[str] | str = replication_shortfall(bootstrap, timeout_s=3) or "ok"
    except Exception as exc:  # noqa: BLE001 - reported as unknown, the probe's other checks stand
        found = f"unknown: {exc}"
    _shortfall[bootstrap] = (time.monotonic(), found)
    return found


def build_router(bootstrap: str, standby: str = "", region: str | None = None) -> APIRouter:
    """The ops routes, with this API process's lag cache and metrics registry; with ``standby``
    (the other region's brokers) the replication lag's gauges too."""
    router = APIRouter(tags=["ops"])
    cache = LagCache(bootstrap)
    registry = CollectorRegistry()
    registry.register(LagCollector(cache))
    if standby:
        registry.register(ReplicationCollector(bootstrap, standby, region or "a"))

    @router.get("/healthz", summary="The API process is up")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok"}

    ready = Cached(lambda: readiness(bootstrap), READY_CACHE_S)

    @router.get("/readyz", summary="Broker reachable, workers hold every partition (details "
                "with the operator key)")
    async def readyz(request: Request, response: Response) -> dict[str, Any]:
        ok, detail = await run_in_threadpool(ready.get)
        response.status_code = 200 if ok else 503
        status = {"status": "ok" if ok else "unavailable"}
        return {**status, **detail} if is_operator(request) else status

    @router.get("/metrics", summary="Prometheus metrics (consumer lag; operator key)")
    async def metrics(request: Request) -> Response:
        _operator(request)
        body = await run_in_threadpool(generate_latest, registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    @router.get("/v1/ops/lag", summary="Consumer lag per group, topic and partition (operator)")
    async def ops_lag(request: Request, group: str | None = None) -> dict[str, Any]:
        _operator(request)
        rows = await run_in_threadpool(cache.rows)
        return {"items": [r.as_dict() for r in rows if group is None or r.group == group],
                "run_backlog": lag.run_backlog(rows, consumer_group(FIRED), FIRED.name)}

    return router
