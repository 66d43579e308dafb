"""``cronstream demo``: a schedule firing at a local receiver, watched live, then read from Postgres."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import psycopg

from streams.adapters import tenants
from streams.execution.targets import FIRE_ID_HEADER, NOMINAL_TIME_HEADER
from streams.runtime.settings import Settings

Behaviour = Callable[[str, int], tuple[int, float]]  # (fire id, nth arrival) -> (status, delay)


class Receiver:
    """A webhook receiver on loopback that prints each fire the moment it arrives.

    ``behave`` lets a caller answer with another status or after a delay (tests use it to make a
    target fail or run long); by default every fire gets a 204 at once. ``arrived_ms`` holds
    when each of ``fires`` arrived (wall clock, ms): the fault suite's allowances for a call
    made twice are about when its first call came."""

    def __init__(self, port: int, behave: Behaviour | None = None, quiet: bool = False,
                 host: str = "127.0.0.1") -> None:
        self.fires: list[str] = []
        self.arrived_ms: list[int] = []
        receiver = self
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fire_id = self.headers.get(FIRE_ID_HEADER, "?")
                with lock:  # the two lists stay in step
                    receiver.fires.append(fire_id)
                    receiver.arrived_ms.append(time.time_ns() // 1_000_000)
                status, delay = behave(fire_id, receiver.fires.count(fire_id)) if behave else (204, 0)
                if not quiet:
                    lag = _lag_ms(self.headers.get(NOMINAL_TIME_HEADER, ""))
                    print(f"  fire {len(receiver.fires):>3}  {fire_id}  (arrived {lag} ms after "
                          "its nominal time)", flush=True)
                time.sleep(delay)
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()


def _lag_ms(nominal_iso: str) -> int:
    try:
        nominal = datetime.fromisoformat(nominal_iso)
    except ValueError:
        return -1
    return int((datetime.now(UTC) - nominal).total_seconds() * 1000)


def wait_for_key(api_url: str, auth: dict[str, str], timeout_s: float = 30) -> None:
    """A new key reaches the API through the tenants topic; wait until it is accepted."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if httpx.get(f"{api_url}/v1/jobs", headers=auth, timeout=10).status_code == 200:
            return
        time.sleep(0.2)
    raise TimeoutError("the API did not accept the new tenant key in time")


def run(s: Settings, seconds: int, receiver_port: int) -> int:
    end = datetime.now(UTC) + timedelta(seconds=seconds)
    body = {
        "schedule": {"cron": "*/2 * * * * *", "end": end.isoformat()},
        "target": {"type": "webhook", "url": f"http://127.0.0.1:{receiver_port}/hook"},
    }
    api_key = tenants.create(s.bootstrap, "demo", partitions=s.partitions,
                             allowed_targets=["127.0.0.1"])
    auth = {"Authorization": f"Bearer {api_key}"}
    wait_for_key(s.api_url, auth)
    with Receiver(receiver_port) as receiver:
        response = httpx.post(f"{s.api_url}/v1/jobs", json=body, headers=auth, timeout=30)
        if response.status_code != 201:
            print(f"creating the demo job failed: HTTP {response.status_code} {response.text}")
            return 1
        job = response.json()
        print(f"\ncreated job {job['id']}: every 2 seconds for {seconds}s → receiver on "
              f"127.0.0.1:{receiver_port}\n  POST /v1/jobs {json.dumps(body)}\n"
              "fires, as the receiver sees them:", flush=True)
        deadline = time.monotonic() + seconds + 10
        while time.monotonic() < deadline:
            time.sleep(0.5)
    expected = len(receiver.fires)
    print("\nthe same runs, from PostgreSQL (table ledger, fed by Kafka Connect):", flush=True)
    rows: list[tuple[object, ...]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with psycopg.connect(s.pg_dsn) as conn:
            try:
                rows = conn.execute(
                    "SELECT fire_id, decision, outcome, status_code, lateness_ms "
                    "FROM ledger WHERE job_id = %s ORDER BY nominal_time", (job["id"],)).fetchall()
            except psycopg.errors.UndefinedTable:
                rows = []
        if expected and len(rows) >= expected:
            break
        time.sleep(1)
    print(f"  {'fire_id':<62} {'decision':<9} {'outcome':<10} {'http':<5} lateness_ms")
    for row in rows:
        print(f"  {row[0]:<62} {row[1]:<9} {row[2]:<10} {row[3]!s:<5} {row[4]}")
    print(f"\n{len(receiver.fires)} fires received, {len(rows)} rows in Postgres. "
          "The stack keeps running: `.venv/bin/cronstream stack down` stops it.")
    # the key is the demo tenant's own, made for this local stack: shown so the console can be
    # opened at once (docs/console.md)
    print(f"\nthe web console: {s.api_url}/ui/jobs/{job['id']}\n  sign in with the demo "
          f"tenant's API key: {api_key}")
    return 0 if rows and len(rows) >= expected > 0 else 1
