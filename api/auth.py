"""``Authorization: Bearer <api key>`` → the tenant. Keys are compared by SHA-256 only."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException, Request

from streams.adapters.tenants import key_hash


def current_tenant(request: Request) -> dict[str, Any]:
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key:
        raise HTTPException(401, detail="missing Authorization: Bearer <api key>",
                            headers={"WWW-Authenticate": "Bearer"})
    tenant = request.app.state.api.tenant_for_key(key_hash(key.strip()))
    if tenant is None:
        raise HTTPException(401, detail="unknown API key", headers={"WWW-Authenticate": "Bearer"})
    if not request.app.state.api.allow_request(tenant):
        raise HTTPException(429, detail=f"tenant {tenant['tenant']} is over its "
                            f"{tenant['requests_per_s']} requests/s", headers={"Retry-After": "1"})
    return tenant
