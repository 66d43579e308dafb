"""Tenants and their API keys. A key is shown once, at creation; only its SHA-256 is stored."""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import Any

from streams.runtime.clock import now_ms

NAME = re.compile(r"^[a-z][a-z0-9-]{1,39}$")
KEY_PREFIX = "cs_"


def key_hash(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def new_tenant(name: str, allowed_targets: list[str] | None = None, max_jobs: int = 100_000,
               min_interval_s: int = 1, requests_per_s: int = 100,
               ip_pools: dict[str, dict[str, Any]] | None = None) -> tuple[dict[str, Any], str]:
    """A Tenant record (schemas/tenant.avsc) and the API key that authenticates as it."""
    if not NAME.match(name):
        raise ValueError("tenant name must be 2-40 characters: lowercase letters, digits, '-', "
                         "starting with a letter")
    api_key = KEY_PREFIX + secrets.token_urlsafe(32)
    record = {
        "tenant": name, "key_sha256": key_hash(api_key),
        "allowed_targets": list(allowed_targets or []), "max_jobs": max_jobs,
        "min_interval_s": min_interval_s, "requests_per_s": requests_per_s,
        "ip_pools": dict(ip_pools or {}), "created_ms": now_ms(),
    }
    return record, api_key


def create(bootstrap: str, name: str, **options: Any) -> str:
    """Write a new tenant (or a new key for an existing one) to the tenants topic; returns the key."""
    from streams.runtime import admin
    from streams.runtime.codec import codec
    from streams.runtime.emit import Emitter
    from streams.topology import TENANTS

    record, api_key = new_tenant(name, **options)
    admin.ensure_topics(bootstrap)
    emitter = Emitter(bootstrap, "cronstream-tenants")
    try:
        emitter.produce(TENANTS, name, codec().encode("Tenant", record))
        if emitter.flush(30):
            raise RuntimeError("the broker did not acknowledge the tenant record")
    finally:
        emitter.close()
    return api_key
