"""Webhook host names, resolved by a name server the test controls (issue 40): a name that
rebinds cannot lead a call to an internal address, and a name server that never answers stalls
no one but its own tenant's call.

The stack's API and worker-1 are restarted for this module inside a mount namespace whose
``/etc/resolv.conf`` names the test's server (``tests/dns_server.py`` on 127.0.40.53, port 53):
so both the C library (what the code used before the fix) and the async resolver (what it uses
now) ask it. glibc is told to wait 30 s a try, 5 tries, as a tenant's unanswering name server
would make it; the async resolver gives up after ``CRONSTREAM_DNS_TIMEOUT_S`` (2 s). Afterwards
both processes are restarted as they were. Needs root (a mount namespace, port 53); every
address used is on loopback.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future

import httpx
import pytest

from stack import processes
from tests.conftest import make_client
from tests.dns_server import NXDOMAIN, SILENT, DnsServer
from tests.security.listener import Listener
from tests.waiting import wait_for

NAME_SERVER = "127.0.40.53"  # loopback, the issue's number in it: its own among other helpers'
ALLOWED = "127.0.40.80"  # what the tenant's allow-list names: stands for a public address
REBIND = "rebind.cs40.test"
HANG = "hang.cs40.test"
RESOLV_CONF = f"nameserver {NAME_SERVER}\noptions timeout:30 attempts:5\n"
NAMESPACED = ("api", "worker-1")
NEVER = {"cron": "0 0 1 1 *"}  # a job that only runs when triggered


class Names:
    """What the name server answers, per name, as each test sets it; anything else does not
    exist."""

    def __init__(self) -> None:
        self.rules: dict[str, Callable[[str, int], list[str] | str | None]] = {}
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def __call__(self, name: str, rdtype: str, count: int) -> list[str] | str | None:
        rule = self.rules.get(name)
        if rule is None:
            return NXDOMAIN
        if rdtype != "A":
            return []  # no IPv6 address: only the A answers matter here
        with self._lock:  # counted from when the rule was set, not from the server's start
            n = self._counts[name] = self._counts.get(name, -1) + 1
        return rule(rdtype, n)

    def set(self, name: str, rule: Callable[[str, int], list[str] | str | None]) -> None:
        with self._lock:
            self.rules[name] = rule
            self._counts.pop(name, None)


def _restart(stack, wrap: list[str] | None) -> None:
    for name in NAMESPACED:
        processes.stop(stack.pidfile(name))
    stack.start_worker("worker-1", ready_timeout_s=180, wrap=wrap)
    stack.start_api(wrap=wrap)


@pytest.fixture(scope="module")
def names(stack, tmp_path_factory) -> Iterator[tuple[Names, DnsServer]]:
    if os.geteuid() != 0:
        pytest.fail("tests/security/test_name_resolution.py needs root: it runs the API and a "
                    "worker in a mount namespace (unshare) with a name server on port 53")
    rules = Names()
    server = DnsServer(NAME_SERVER, rules)
    resolv = tmp_path_factory.mktemp("cs40-dns") / "resolv.conf"
    resolv.write_text(RESOLV_CONF)
    wrap = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" /etc/resolv.conf && exec "$@"', str(resolv)]
    _restart(stack, wrap)
    try:
        yield rules, server
    finally:
        try:
            _restart(stack, None)
        finally:
            server.close()


def _job(client: httpx.Client, url: str, **extra) -> str:
    response = client.post("/v1/jobs", json={"schedule": NEVER, "target": {
        "type": "webhook", "url": url, "timeout_s": 5}, **extra})
    assert response.status_code == 201, response.text
    return response.json()["id"]


def test_a_name_that_rebinds_to_loopback_after_the_check_never_reaches_it(stack, names):
    rules, server = names
    with Listener(ALLOWED) as allowed, Listener("127.0.0.1", allowed.port) as internal, \
            make_client(stack, allowed_targets=[ALLOWED]) as tenant:
        rules.set(REBIND, lambda rdtype, n: [ALLOWED])  # at creation, the name is harmless
        job = _job(tenant, f"http://{REBIND}:{allowed.port}/hook")
        # now: the allowed address to the first question, 127.0.0.1 to every later one
        rules.set(REBIND, lambda rdtype, n: [ALLOWED] if n == 0 else ["127.0.0.1"])
        fired = tenant.post(f"/v1/jobs/{job}/trigger")
        assert fired.status_code == 202, fired.text
        fire_id = fired.json()["fire_id"]
        wait_for(lambda: allowed.arrivals or internal.arrivals, timeout_s=60)
    assert internal.arrivals == [], "the call reached 127.0.0.1, where the name pointed next"
    assert [a.fire_id for a in allowed.arrivals] == [fire_id]
    assert allowed.arrivals[0].host == f"{REBIND}:{allowed.port}", "the URL's own Host header"
    asked = [q.answered for q in server.asked(REBIND)]
    assert asked[-1] == [ALLOWED], f"the worker asked the name more than once per call: {asked}"


def test_a_name_server_that_never_answers_holds_up_no_other_request_of_the_api(stack, names):
    rules, server = names
    rules.set(HANG, lambda rdtype, n: SILENT)
    done: list[tuple[str, float]] = []

    def create(client: httpx.Client, url: str, who: str) -> httpx.Response:
        response = client.post("/v1/jobs", json={"schedule": NEVER, "target": {
            "type": "webhook", "url": url}})
        done.append((who, time.monotonic()))
        return response

    with make_client(stack) as slow, make_client(stack) as other:
        hanging: Future[httpx.Response] = Future()
        threading.Thread(target=lambda: hanging.set_result(
            create(slow, f"http://{HANG}/hook", "hanging")), daemon=True).start()
        wait_for(lambda: server.asked(HANG), timeout_s=30)
        # the API is now waiting for an answer that never comes: another tenant's request
        # must be served meanwhile, before the waiting create gives up
        answered = create(other, "http://127.0.0.1:9/hook", "other")
        refused = hanging.result(timeout=120)
    assert answered.status_code == 201, answered.text
    assert [who for who, _ in done] == ["other", "hanging"], \
        "the other tenant's request waited for the unanswered name"
    assert refused.status_code == 422, refused.text
    detail = refused.json()["detail"][0]
    assert detail["loc"] == ["body", "target", "url"] and "did not resolve within" in detail["msg"]


def test_a_name_server_that_never_answers_holds_up_no_other_tenants_run(stack, names):
    rules, server = names
    with Listener("127.0.0.1") as theirs, Listener("127.0.0.1") as ours, \
            make_client(stack) as hanging, make_client(stack) as other:
        rules.set(HANG, lambda rdtype, n: ["127.0.0.1"])  # answered while the job is created
        stuck = _job(hanging, f"http://{HANG}:{theirs.port}/hook",
                     retry={"max_attempts": 3, "initial_backoff_s": 10})
        quick = _job(other, f"http://127.0.0.1:{ours.port}/hook")
        rules.set(HANG, lambda rdtype, n: SILENT)
        asked_before = len(server.asked(HANG))
        assert hanging.post(f"/v1/jobs/{stuck}/trigger").status_code == 202
        first = wait_for(lambda: server.asked(HANG)[asked_before:], timeout_s=60)[0]
        # the worker is waiting on that question; another tenant's run must go ahead
        assert other.post(f"/v1/jobs/{quick}/trigger").status_code == 202
        wait_for(lambda: ours.arrivals, timeout_s=60)
        # and the waiting call gives up by itself: the worker asks again for its retry
        retried = wait_for(lambda: [q for q in server.asked(HANG)[asked_before:]
                                    if q.at > first.at + 1], timeout_s=60)[0]
    assert theirs.arrivals == []
    assert first.at < ours.arrivals[0].at < retried.at, \
        "the other tenant's run waited for the unanswered name"

