"""Prometheus metrics of a worker, and the small HTTP server that exposes them with its health.

The server runs on its own thread, not on the worker's event loop: a loop stuck in a long
callback must still be *reported* (``/healthz`` turns 503 when the scheduler's punctuator has
not ticked for ``STALL_S``), and a scrape must never delay a fire.

    GET /metrics   Prometheus text format
    GET /healthz   200 while the event loop ticks, 503 when it is stalled
    GET /readyz    200 once the worker holds partitions and has recovered its tables
"""

from __future__ import annotations

import gc
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest

STALL_S = 30.0

SLOTS_DECIDED = Counter("cronstream_slots_decided_total",
                        "Slots the scheduler decided, by decision (fired, skipped_*, expired_stale, ...)",
                        ["decision"])
SLOTS_REACHED = Counter("cronstream_slots_reached_total",
                        "Due slots the scheduler reached, by whether the look-ahead had prepared "
                        "them (ahead) or not (at_due: slower; in spikes, the look-ahead fell "
                        "behind)", ["prepared"])
for _prepared in ("ahead", "at_due"):
    SLOTS_REACHED.labels(_prepared)  # both series from the start, at 0
SLOTS_PREPARED = Gauge("cronstream_slots_prepared",
                       "Slots prepared ahead of their second and not yet due (at most "
                       "streams.scheduling.deciding.PREPARED_MAX)")
FIRE_LATENESS = Histogram("cronstream_fire_lateness_seconds",
                          "From a slot's nominal time to the executor starting it",
                          buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300))
EXECUTIONS = Counter("cronstream_executions_total", "Executed slots by outcome", ["outcome"])
CAMPAIGN_SENDS = Counter("cronstream_campaign_sends_total",
                         "Campaign recipients by outcome (sent, suppressed, unknown, ...)",
                         ["outcome"])
REPUTATION_PAUSED = Counter(
    "cronstream_reputation_paused_total",
    "Campaigns paused by the reputation guard, by tenant and the rate that crossed its threshold "
    "(bounce, complaint: streams.campaigns.reputation)", ["tenant", "kind"])
SES_FEEDBACK_APPLIED = Counter(
    "cronstream_ses_feedback_total",
    "SES feedback records by event type and what they did (ignored, duplicate, stale, counted, "
    "suppress: streams.campaigns.bounces)", ["event_type", "effect"])
SES_THROTTLES = Counter("cronstream_ses_throttles_total", "SES calls answered with throttling")
SKIPPED_RECORDS_REDELIVERED = Counter(
    "cronstream_skipped_records_redelivered_total",
    "Partitions sought back to their committed offset: records there never reached the agent "
    "(streams.runtime.commit_watch)", ["topic"])
RECONCILER_CATCHES = Counter("cronstream_reconciler_catches_total",
                             "Slots the reconciler found undecided, by action", ["action"])
JOBS_DELETED_COMPLETED = Counter(
    "cronstream_jobs_deleted_completed_total",
    "Jobs deleted by the scheduler once completed (delete_after_completion)")
UNKNOWN_RESOLVED = Counter("cronstream_unknown_resolved_total",
                           "Recipients recorded unknown that an SES event later resolved to sent "
                           "(streams.campaigns.unknown)")
FANOUT_FENCED = Counter("cronstream_fanout_fenced_total",
                        "Chunks a walker did not send: the coordinator gave its partition away")
FANOUT_INTENT_OPEN = Histogram(
    "cronstream_fanout_intent_open_seconds",
    "From a chunk's acknowledged intent to its request leaving: how wide unknown is at a crash",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0))
REBALANCES = Counter("cronstream_rebalances_total", "Partition assignments this worker received")
RUN_BACKLOG = Gauge("cronstream_run_backlog_slots",
                    "Fired slots this worker has read and not yet resolved (waiting or running)")
RUN_BACKLOG_AGE = Gauge("cronstream_run_backlog_age_seconds",
                        "How long past its nominal time the oldest waiting slot is (0: none wait)")
RUNS_PER_HOST = Gauge("cronstream_runs_per_host_limit",
                      "Calls in flight to one webhook host this worker allows (CRONSTREAM_RUNS_PER_HOST)")
RUNS_EXPIRED = Counter("cronstream_runs_expired_total",
                       "Slots whose turn to run came after their max_lateness_s: expired_stale")
ASSIGNED = Gauge("cronstream_assigned_partitions", "Partitions of the jobs topic held")
STANDBY_BEHIND = Gauge("cronstream_standby_behind_records",
                       "Changelog records this worker's standbys have not read yet: what a "
                       "takeover would replay before firing (streams.runtime.standbys)", ["changelog"])


GC_PAUSE = Histogram("cronstream_gc_pause_seconds",
                     "Python's cyclic garbage collections, by generation: every thread waits",
                     ["generation"], buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2))
GC_WARN_S = 0.1

log = logging.getLogger(__name__)


def watch_gc() -> Callable[[str, dict[str, int]], None]:
    """Time every collection (``cronstream_gc_pause_seconds``) and log the long ones: a full
    collection stops the whole process, scheduler and executors alike, and shows in no
    profile under its own name."""
    started: dict[str, float] = {}

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started["at"] = time.perf_counter()
            return
        pause = time.perf_counter() - started.pop("at", time.perf_counter())
        GC_PAUSE.labels(str(info["generation"])).observe(pause)
        if pause >= GC_WARN_S:
            log.warning("garbage collection of generation %d took %.0f ms (%d collected)",
                        info["generation"], pause * 1000, info["collected"])

    gc.callbacks.append(on_gc)
    return on_gc


@dataclass
class WorkerHealth:
    """What ``/healthz`` and ``/readyz`` answer from; written by the worker's event loop."""

    started: float = field(default_factory=time.monotonic)
    last_tick: float | None = None
    recovered: bool = False
    partitions: list[int] = field(default_factory=list)
    # topics replicated below the setting, found at start (``admin.replication_shortfall``):
    # shown by /readyz, not failing it, since a probe failing on every worker would take the
    # whole service out for what an operator fixes with a reassignment
    replication: list[str] = field(default_factory=list)

    def tick(self) -> None:
        self.last_tick = time.monotonic()

    def live(self, now: float) -> tuple[bool, dict[str, Any]]:
        seen = self.last_tick if self.last_tick is not None else self.started
        stalled = now - seen
        return stalled < STALL_S, {"loop_stalled_s": round(stalled, 1)}

    def ready(self, now: float) -> tuple[bool, dict[str, Any]]:
        live, detail = self.live(now)
        ok = live and self.recovered and bool(self.partitions)
        return ok, {**detail, "recovered": self.recovered, "partitions": self.partitions,
                    "replication": self.replication or "ok"}


def serve(health: WorkerHealth, host: str, port: int) -> ThreadingHTTPServer:
    """Start the metrics/health server on a daemon thread; returns it (``shutdown()`` stops)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            path = self.path.split("?")[0]
            if path == "/metrics":
                self._send(200, generate_latest(), CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/readyz"):
                probe = health.live if path == "/healthz" else health.ready
                ok, detail = probe(time.monotonic())
                body = json.dumps({"status": "ok" if ok else "unavailable", **detail}).encode()
                self._send(200 if ok else 503, body, "application/json")
            else:
                self._send(404, b'{"detail":"not found"}', "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - scrapes are noise
            return

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
