"""The API's routes, enumerated from the application itself, and a body each accepts: the
suite's one way to call every route, so a route added later is covered without being listed
(and a new kind of route makes ``body_for`` fail until it is given a body)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from api.app import create_app

# a job that passes validation and never fires in a test's lifetime
JOB = {"schedule": {"cron": "0 0 1 1 *"}, "target": {"type": "webhook", "url": "http://127.0.0.1:9/x"}}


def operations(prefix: str = "/v1/") -> list[tuple[str, str]]:
    """(method, path) of every operation of the OpenAPI document under ``prefix``."""
    paths = create_app().openapi()["paths"]
    return sorted((method.upper(), path) for path, ops in paths.items()
                  if path.startswith(prefix) for method in ops)


def routes_with(param: str) -> list[tuple[str, str]]:
    """(method, path) of every operation whose path names ``param``."""
    return [(method, path) for method, path in operations("/") if f"{{{param}}}" in path]


def body_for(method: str, path: str) -> dict:
    """Request options with a body that passes validation, so what answers is the route."""
    now = datetime.now(UTC)
    if path.endswith("/backfill"):
        return {"json": {"from": (now - timedelta(hours=1)).isoformat(), "to": now.isoformat()}}
    if path.endswith("/recipients"):
        return {"content": b"email\nx@example.org\n", "headers": {"content-type": "text/csv"}}
    if method == "PUT" and path == "/v1/jobs/{job_id}":
        return {"json": JOB}
    assert method in ("GET", "DELETE", "POST"), f"give {method} {path} a body in body_for"
    return {}
