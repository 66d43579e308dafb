"""An anonymous request cannot exhaust the API's memory (issue 40, the first finding).

``PUT /v1/jobs/recipients`` is ``PUT /v1/jobs/{job_id}``, and the body limit used to skip every
path ending in ``/recipients``: FastAPI read the whole chunked body (its JSON parameter comes
before any dependency, the authentication included) and only then answered. A 1.5 GB body with
no key took the API from 0.89 to 3.35 GB. Judged here from the kernel's own record of the API
process's peak resident set (``VmHWM``, reset through ``clear_refs`` first), not from anything
the API says.
"""

from __future__ import annotations

import re

import httpx

from stack import processes
from tests.api_routes import operations
from tests.security.memory import ALLOWED_GROWTH_KB, chunks, reset_peak, status_kb

BODY_MB = 256  # enough to see: before the fix the API's peak grew by about twice this


def _send(url: str, method: str) -> int | None:
    """A chunked body of ``BODY_MB`` with no Authorization: the answer's status, or None when
    the API closed the connection before taking it all (which is the point)."""
    try:
        return httpx.request(method, url, content=chunks(BODY_MB, b"["),
                             headers={"content-type": "application/json"}, timeout=120).status_code
    except httpx.TransportError:
        return None


def test_an_anonymous_chunked_body_leaves_the_apis_peak_memory_where_it_was(stack):
    pid = processes.alive(stack.pidfile("api"))
    assert pid is not None, "the API is not running"
    baseline_kb = reset_peak(pid)
    status = _send(f"{stack.s.api_url}/v1/jobs/recipients", "PUT")
    peak_kb = status_kb(pid, "VmHWM")
    assert peak_kb - baseline_kb < ALLOWED_GROWTH_KB, (
        f"an anonymous {BODY_MB} MiB body moved the API's peak RSS from {baseline_kb // 1024} "
        f"to {peak_kb // 1024} MiB (answered {status})")
    assert status in (None, 401, 413), status
    assert httpx.get(f"{stack.s.api_url}/healthz", timeout=10).status_code == 200


def test_no_route_but_the_streamed_ones_takes_an_anonymous_body_past_the_limit(stack):
    """Every operation of the API and the console's form posts, each path parameter
    ``recipients`` (the name that fooled the old limit), answers an anonymous body over the
    limit with a 413; the routes allowed a larger body (the recipient upload, the streamed job
    import) with a 401, unread."""
    from api.app import MAX_BODY_BYTES, body_unlimited

    body = b"[" + b" " * MAX_BODY_BYTES + b"]"
    paths = [(m, re.sub(r"\{[^}]+\}", "recipients", p)) for m, p in operations("/")
             if m in ("POST", "PUT", "PATCH", "DELETE")]
    paths += [("POST", "/ui/login"), ("POST", "/ui/jobs"), ("POST", "/ui/campaigns/recipients/upload")]
    answers = {}
    for method, path in paths:
        response = httpx.request(method, f"{stack.s.api_url}{path}", content=body,
                                 headers={"content-type": "application/json"}, timeout=30)
        answers[(method, path)] = response.status_code
    expected = {key: 401 if body_unlimited(*key) else 413 for key in answers}
    assert answers == expected
    assert sorted(key for key, status in expected.items() if status == 401) == [
        ("POST", "/v1/job-imports/stream"), ("PUT", "/v1/campaigns/recipients/recipients")], \
        "the streamed routes are among those tried"
