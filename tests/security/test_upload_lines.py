"""A tenant's recipient upload cannot exhaust the API's memory either (issue 40): the route
buffered until a newline, so a body without one, or a CSV header line that never ended, grew
without bound. Judged from the kernel's record of the API's peak resident memory."""

from __future__ import annotations

import httpx

from stack import processes
from tests.integration.test_campaigns import campaign_body
from tests.security.memory import ALLOWED_GROWTH_KB, chunks, reset_peak, status_kb

BODY_MB = 256


def _upload(api: httpx.Client, campaign_id: str, body) -> httpx.Response:
    return api.put(f"/v1/campaigns/{campaign_id}/recipients", content=body,
                   headers={"content-type": "text/csv"}, timeout=300)


def test_a_line_that_never_ends_leaves_the_apis_peak_memory_where_it_was(stack, api):
    pid = processes.alive(stack.pidfile("api"))
    assert pid is not None
    created = api.post("/v1/campaigns", json=campaign_body(seconds=3600)).json()
    # a header line that never ends: refused, the upload rolled back, nothing accepted
    baseline = reset_peak(pid)
    header = _upload(api, created["id"], chunks(BODY_MB, b"email,", b"x"))
    grown = status_kb(pid, "VmHWM") - baseline
    assert grown < ALLOWED_GROWTH_KB, f"the API's peak grew {grown >> 10} MiB"
    assert header.status_code == 400 and "CSV header" in header.text, header.text[:300]
    assert api.get(f"/v1/campaigns/{created['id']}").json()["status"] == "aborted"
    # a data line that never ends: a bad row, the rows before it kept
    baseline = reset_peak(pid)
    row = _upload(api, created["id"], chunks(BODY_MB, b"email\na@example.org\n", b"y"))
    grown = status_kb(pid, "VmHWM") - baseline
    assert grown < ALLOWED_GROWTH_KB, f"the API's peak grew {grown >> 10} MiB"
    assert row.status_code == 200, row.text[:300]
    report = row.json()
    assert report["recipients"] == 1 and report["bad_rows"] == 1
    assert "longer than" in report["bad_rows_listed"][0]["reason"]
