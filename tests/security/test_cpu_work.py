"""One tenant's costly requests hold up no other tenant's (issue 40): a cron whose slots fall
only in a DST gap is searched for decades before it is refused (``* * 2 * 3 0#2`` in New York,
with ``gap: skip``: seconds of CPU a request), and that search ran on the API's event loop.
Judged from the order the answers came back in, as the clients saw them."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import httpx

from stack import processes
from tests.conftest import make_client
from tests.waiting import wait_for

NEVER_IN_A_GAP = {"cron": "* * 2 * 3 0#2", "timezone": "America/New_York",
                  "dst": {"gap": "skip"}}
FLOOD = 4


def cpu_s(pid: int) -> float:
    """The process's CPU time so far (user + system), from the kernel."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_costly_validation_of_one_tenant_holds_up_no_other_tenants_request(stack):
    with make_client(stack) as greedy, make_client(stack) as other:
        job = other.post("/v1/jobs", json={"schedule": {"cron": "0 0 1 1 *"}, "target": {
            "type": "webhook", "url": "http://127.0.0.1:9/hook"}})
        assert job.status_code == 201, job.text
        done: list[tuple[str, float, int]] = []
        lock = threading.Lock()

        def costly() -> None:
            response = greedy.post("/v1/jobs", json={"schedule": NEVER_IN_A_GAP, "target": {
                "type": "webhook", "url": "http://127.0.0.1:9/hook"}}, timeout=300)
            with lock:
                done.append(("costly", time.monotonic(), response.status_code))

        pid = processes.alive(stack.pidfile("api"))
        assert pid is not None
        spent = cpu_s(pid)
        flood = [threading.Thread(target=costly) for _ in range(FLOOD)]
        for thread in flood:
            thread.start()
        # the API is searching now: it has spent half a second of CPU since the flood began
        wait_for(lambda: cpu_s(pid) - spent > 0.5, timeout_s=60, every_s=0.05)
        answer = other.get(f"/v1/jobs/{job.json()['id']}", timeout=300)
        with lock:
            done.append(("other", time.monotonic(), answer.status_code))
        for thread in flood:
            thread.join(300)
    order = [who for who, _, _ in sorted(done, key=lambda d: d[1])]
    assert answer.status_code == 200
    assert order[0] == "other", f"the other tenant's read waited for the costly ones: {order}"
    assert [status for who, _, status in done if who == "costly"] == [422] * FLOOD
    assert httpx.get(f"{stack.s.api_url}/healthz", timeout=10).status_code == 200
