"""What the API process holds: a producer, views of the tenants, jobs, campaigns and suppressions
topics, rate limiters.

The API owns no database of record: it writes commands to topics and reads state back from views
of the compacted topics (``streams.runtime.topic_view``) and run history from the ledger's sink in
Postgres. The jobs view keeps its records in a SQLite file (``api.job_store.JobStore``: indexed
by tenant, each job's state and next run kept current beside it) under the stack's home:
millions of jobs fit neither a dict nor a restart that reads the whole topic.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from starlette.requests import Request

from api.heavy import TenantWork
from api.job_store import JobStore, Refresher
from api.quotas import Quotas
from api.rate_limit import TenantRates
from streams.adapters import dns
from streams.campaigns import retention
from streams.runtime.emit import DeliveryCallback, Emitter
from streams.runtime.record_stores import MemoryStore, SqliteStore
from streams.runtime.settings import API_START_S, Settings
from streams.runtime.topic_view import TopicView
from streams.topology import CAMPAIGNS, JOBS, SUPPRESSIONS, TENANTS, TopicSpec


def jobs_store_path(conf: Settings) -> Path:
    """The API's store of the jobs view: one file per stack home, a cache of the jobs topic."""
    return conf.home / "api" / "jobs.sqlite3"


def jobs_store(conf: Settings) -> JobStore:
    return JobStore(jobs_store_path(conf))


def suppressions_store(conf: Settings) -> SqliteStore:
    """The suppressions view's store, indexed by tenant: a list with every bounce of a 50M
    campaign fits no dict either (``GET /v1/suppressions``)."""
    return SqliteStore(conf.home / "api" / "suppressions.sqlite3", "Suppression", "tenant")


class Emits(Protocol):
    """What the routes ask of a producer (``streams.runtime.emit.Emitter`` in the API process)."""

    async def send(self, topic: TopicSpec, key: str, value: bytes | None,
                   partition: int | None = None,
                   headers: dict[str, str | bytes] | None = None) -> None: ...

    def acked(self, topic: TopicSpec, records: Sequence[tuple[str, bytes | None]],
              partition: int | None = None,
              headers: dict[str, str | bytes] | None = None) -> Awaitable[None]: ...

    def produce(self, topic: TopicSpec, key: str, value: bytes | None,
                partition: int | None = None, on_delivery: DeliveryCallback | None = None,
                headers: dict[str, str | bytes] | None = None) -> None: ...

    def flush(self, timeout_s: float = 30.0) -> int: ...

    def close(self) -> None: ...


class ApiState:
    """The stores the routes read and write, the producer, the tenants' rates.

    Built from its parts, with no broker: ``connect`` is what makes it the API process's state,
    by starting the views that fill the stores from their topics. So the application can be
    built around a state whose stores a test fills itself (``api.app.create_app(state)``).
    """

    def __init__(self, conf: Settings, emitter: Emits,
                 clock: Callable[[], float] = time.monotonic,
                 resolver: dns.Resolver | None = None) -> None:
        self.conf = conf
        self.emitter = emitter
        # webhook hosts are resolved over asyncio within the settings' timeout, never with
        # getaddrinfo on the event loop (``streams.adapters.dns``)
        self.resolver = resolver or dns.Resolver(conf.dns_timeout_s)
        self._lock = threading.Lock()
        self._keys: dict[str, str] = {}
        self.tenants = MemoryStore(self._index_key)
        self.jobs = jobs_store(conf)
        self.campaigns = MemoryStore()
        self.suppressions = suppressions_store(conf)
        self.rates = TenantRates(clock)
        self.work = TenantWork()  # CPU-bound request work, off the loop, capped per tenant
        self.quotas = Quotas()  # counts reserved from a quota's check until the write is held
        self._views: list[TopicView] = []
        self._refresher: Refresher | None = None
        # cronstream.recipients' retention.ms as the cluster applies it (-1: kept until pruned,
        # streams.campaigns.retention); asked at each campaign create and schedule
        self.recipients_retention_ms: Callable[[], int] = lambda: -1

    @classmethod
    def connect(cls, conf: Settings) -> ApiState:
        """The API process's state: each store kept current by a view of its topic, caught up
        before this returns."""
        state = cls(conf, Emitter(conf.bootstrap, "cronstream-api"))
        state.recipients_retention_ms = lambda: retention.retention_ms(conf.bootstrap)
        state._views = [TopicView(conf.bootstrap, TENANTS, state.tenants).start(),
                        TopicView(conf.bootstrap, JOBS, state.jobs).start(API_START_S),
                        TopicView(conf.bootstrap, CAMPAIGNS, state.campaigns).start(),
                        TopicView(conf.bootstrap, SUPPRESSIONS, state.suppressions
                                  ).start(API_START_S)]
        # what went stale while the views caught up (a first start at 10M: the slots of its
        # 12 minutes) is brought to now before the API answers, not by its first list
        state.jobs.refresh()
        state._refresher = Refresher(state.jobs).start()
        return state

    def _index_key(self, name: str, tenant: dict[str, Any] | None) -> None:
        with self._lock:
            for digest in [d for d, t in self._keys.items() if t == name]:
                del self._keys[digest]
            if tenant is not None:
                self._keys[tenant["key_sha256"]] = name

    def tenant_for_key(self, digest: str) -> dict[str, Any] | None:
        with self._lock:
            name = self._keys.get(digest)
        return self.tenants.get(name) if name else None

    def job_ids(self, tenant: str, after: str | None, limit: int) -> list[str]:
        """One page of the tenant's job ids, in id order, after the cursor ``after``."""
        return self.jobs.keys_for(tenant, after, limit)

    def job_count(self, tenant: str) -> int:
        """The tenant's jobs, for its quota: a kept count, not a count of the index."""
        return self.jobs.count_for(tenant)

    def campaign_count(self, tenant: str) -> int:
        """The tenant's campaigns, any status (the view holds a few thousand in all)."""
        return sum(1 for c in self.campaigns.values() if c["tenant"] == tenant)

    def suppression_count(self, tenant: str) -> int:
        return self.suppressions.count_for(tenant)

    def allow_request(self, tenant: dict[str, Any]) -> bool:
        """The tenant's rate as its record says now: a changed rate holds from this request."""
        return self.rates.allow(tenant["tenant"], tenant["requests_per_s"])

    def close(self) -> None:
        if self._refresher is not None:
            self._refresher.stop()
        stopped = [view.stop() for view in self._views]
        if all(stopped):  # else a view's thread may still write: the process is exiting anyway
            self.jobs.close()
            self.suppressions.close()
        self.emitter.close()


def api_state(request: Request) -> ApiState:
    """The API process's state, as a route reaches it (``api.app.create_app`` sets it)."""
    state: ApiState = request.app.state.api
    return state
