"""What the API process holds: a producer, views of the tenants and jobs topics, rate limiters.

The API owns no database: it writes commands to topics and reads state back from views of the
compacted topics (``streams.views``) and run history from the ledger's sink in Postgres.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

from streams.emit import Emitter
from streams.pacing import TokenBucket
from streams.settings import Settings
from streams.topology import CAMPAIGNS, JOBS, TENANTS
from streams.views import TopicView


class ApiState:
    def __init__(self, conf: Settings) -> None:
        self.conf = conf
        self.emitter = Emitter(conf.bootstrap, "cronstream-api")
        self.jobs_by_tenant: dict[str, set[str]] = defaultdict(set)
        self._lock = threading.Lock()
        self._buckets: dict[str, TokenBucket] = {}
        self._keys: dict[str, str] = {}
        self.tenants = TopicView(conf.bootstrap, TENANTS, self._index_key).start()
        self.jobs = TopicView(conf.bootstrap, JOBS, self._index_job).start()
        self.campaigns = TopicView(conf.bootstrap, CAMPAIGNS).start()

    def _index_key(self, name: str, tenant: dict[str, Any] | None) -> None:
        with self._lock:
            for digest in [d for d, t in self._keys.items() if t == name]:
                del self._keys[digest]
            if tenant is not None:
                self._keys[tenant["key_sha256"]] = name

    def _index_job(self, job_id: str, job: dict[str, Any] | None) -> None:
        with self._lock:
            if job is None:
                for ids in self.jobs_by_tenant.values():
                    ids.discard(job_id)
            else:
                self.jobs_by_tenant[job["tenant"]].add(job_id)

    def tenant_for_key(self, digest: str) -> dict[str, Any] | None:
        with self._lock:
            name = self._keys.get(digest)
        return self.tenants.get(name) if name else None

    def job_ids(self, tenant: str) -> list[str]:
        with self._lock:
            return sorted(self.jobs_by_tenant.get(tenant, ()))

    def allow_request(self, tenant: dict[str, Any]) -> bool:
        rate = max(1, tenant["requests_per_s"])
        bucket = self._buckets.setdefault(tenant["tenant"], TokenBucket(rate, 2 * rate))
        return bucket.take(time.monotonic())

    def close(self) -> None:
        self.tenants.stop()
        self.jobs.stop()
        self.campaigns.stop()
        self.emitter.close()
