"""What the API process holds: a producer, views of the tenants and jobs topics, rate limiters.

The API owns no database of record: it writes commands to topics and reads state back from views
of the compacted topics (``streams.runtime.views``) and run history from the ledger's sink in Postgres.
The jobs view keeps its records in a SQLite file (``SqliteStore``, indexed by tenant) under the
stack's home: millions of jobs fit neither a dict nor a restart that reads the whole topic.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from streams.campaigns.pacing import TokenBucket
from streams.runtime.emit import Emitter
from streams.runtime.settings import API_START_S, Settings
from streams.runtime.view_stores import MemoryStore, SqliteStore
from streams.runtime.views import TopicView
from streams.topology import CAMPAIGNS, JOBS, TENANTS


def jobs_store_path(conf: Settings) -> Path:
    """The API's store of the jobs view: one file per stack home, a cache of the jobs topic."""
    return conf.home / "api" / "jobs.sqlite3"


def jobs_store(conf: Settings) -> SqliteStore:
    return SqliteStore(jobs_store_path(conf), "Job", "tenant")


class ApiState:
    def __init__(self, conf: Settings) -> None:
        self.conf = conf
        self.emitter = Emitter(conf.bootstrap, "cronstream-api")
        self._lock = threading.Lock()
        self._buckets: dict[str, TokenBucket] = {}
        self._keys: dict[str, str] = {}
        self.tenants = TopicView(conf.bootstrap, TENANTS, MemoryStore(self._index_key)).start()
        self.job_store = jobs_store(conf)
        self.jobs = TopicView(conf.bootstrap, JOBS, self.job_store).start(API_START_S)
        self.campaigns = TopicView(conf.bootstrap, CAMPAIGNS).start()

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
        return self.job_store.keys_for(tenant, after, limit)

    def job_count(self, tenant: str) -> int:
        """The tenant's jobs, for its quota: a kept count, not a count of the index."""
        return self.job_store.count_for(tenant)

    def allow_request(self, tenant: dict[str, Any]) -> bool:
        rate = max(1, tenant["requests_per_s"])
        bucket = self._buckets.setdefault(tenant["tenant"], TokenBucket(rate, 2 * rate))
        return bucket.take(time.monotonic())

    def close(self) -> None:
        self.tenants.stop()
        if self.jobs.stop():  # else its thread may still write: the process is exiting anyway
            self.job_store.close()
        self.campaigns.stop()
        self.emitter.close()
