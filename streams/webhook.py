"""Calls a webhook target once. Retries and their pacing are the executor's business."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

FIRE_ID_HEADER = "X-Cronstream-Fire-Id"
NOMINAL_TIME_HEADER = "X-Cronstream-Nominal-Time"


@dataclass(frozen=True)
class CallResult:
    ok: bool
    status_code: int | None
    error: str | None


async def call(client: httpx.AsyncClient, target: dict[str, Any], fire_id: str,
               nominal_iso: str) -> CallResult:
    """One attempt. A 2xx is success; anything else (status or transport error) is a failure."""
    headers = dict(target.get("headers") or {})
    headers[FIRE_ID_HEADER] = fire_id
    headers[NOMINAL_TIME_HEADER] = nominal_iso
    body = target.get("body")
    try:
        response = await client.request(
            target.get("method") or "POST", target["url"], headers=headers,
            content=body.encode() if body is not None else None,
            timeout=target.get("timeout_s") or 10.0,
        )
    except httpx.HTTPError as exc:
        return CallResult(False, None, f"{type(exc).__name__}: {exc}"[:500])
    if 200 <= response.status_code < 300:
        return CallResult(True, response.status_code, None)
    return CallResult(False, response.status_code, f"HTTP {response.status_code}")
