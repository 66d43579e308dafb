"""The operator's pages (operator key only): consumer lag per group and topic with time lag and
a chart of it over the last minutes, the stream topology drawn from ``streams.topology``, and
worker health read from the worker's own ``/metrics``.

Why the lag chart keeps its samples here: lag is read from the broker when asked (``ops.lag``),
not stored anywhere, so the console remembers what it read (one sample per view, at most
``LAG_SAMPLES``) rather than adding a time series store.
"""

from __future__ import annotations

import asyncio
import html
import time
from collections import deque
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from api.console.web import SignedIn, operator_only, render, signed_in
from api.state import api_state
from ops import graph, lag
from streams.runtime.admin import end_offsets
from streams.topology import DLQ, FIRED, consumer_group

router = APIRouter()
Who = Annotated[SignedIn, Depends(signed_in)]
LAG_SAMPLES = 120
LOCAL_WORKERS = 4  # the local stack's workers probed when no address is configured
# the worker's gauges and counters a person on call reads first
HEALTH_METRICS = ("cronstream_assigned_partitions", "cronstream_standby_behind_records",
                  "cronstream_reconciler_catches_total", "cronstream_run_backlog_slots",
                  "cronstream_run_backlog_age_seconds", "cronstream_rebalances_total",
                  "cronstream_runs_expired_total", "cronstream_slots_decided_total")


class LagHistory:
    """Total lag per group, one sample per read, the last ``LAG_SAMPLES`` kept."""

    def __init__(self) -> None:
        self.samples: deque[tuple[float, dict[str, int]]] = deque(maxlen=LAG_SAMPLES)

    def add(self, at_s: float, rows: list[lag.PartitionLag]) -> None:
        totals: dict[str, int] = {}
        for r in rows:
            totals[r.group] = totals.get(r.group, 0) + (r.lag or 0)
        self.samples.append((at_s, totals))

    def chart(self, width: int = 600, height: int = 120) -> str:
        """An SVG of each group's total lag over the samples (drawn here, no chart library)."""
        if len(self.samples) < 2:
            return ""
        t0, t1 = self.samples[0][0], self.samples[-1][0]
        groups = sorted({g for _, totals in self.samples for g in totals})
        top = max(1, max((v for _, totals in self.samples for v in totals.values()), default=1))
        colours = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
        lines = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height + 20}" '
                 f'role="img" aria-label="total consumer lag per group over the last '
                 f'{round(t1 - t0)} s" class="lag-chart">']
        for i, g in enumerate(groups):
            points = " ".join(
                f"{(at - t0) / max(1e-9, t1 - t0) * width:.1f},"
                f"{height - totals.get(g, 0) / top * height:.1f}" for at, totals in self.samples)
            # a group's name is whatever a Kafka client called its group: escaped, since the
            # page shows this SVG as markup (an unescaped name ran script there: issue 40)
            lines.append(f'<polyline fill="none" stroke="{colours[i % len(colours)]}" '
                         f'stroke-width="2" points="{points}"><title>{html.escape(g)}</title>'
                         '</polyline>')
        lines.append(f'<text x="2" y="{height + 16}" font-size="11">max {top} records over '
                     f'{round(t1 - t0)} s</text></svg>')
        return "\n".join(lines)


HISTORY = LagHistory()


def _health(text: str) -> list[tuple[str, str]]:
    """The ``HEALTH_METRICS`` samples of a Prometheus text page, as (series, value)."""
    out = []
    for line in text.splitlines():
        if line and not line.startswith("#") and line.startswith(HEALTH_METRICS):
            series, _, value = line.rpartition(" ")
            out.append((series, value))
    return out


def worker_metrics_urls(base_port: int, listed: tuple[str, ...] = ()) -> list[str]:
    """Where the workers' ``/metrics`` are: ``listed`` (``CRONSTREAM_CONSOLE_WORKER_METRICS``,
    ``Settings.console_worker_metrics``) where they run elsewhere, else the local stack's (worker
    N on the base port + N)."""
    if listed:
        return list(listed)
    return [f"http://127.0.0.1:{base_port + n}/metrics" for n in range(LOCAL_WORKERS + 1)]


def _dlq_records(bootstrap: str, partitions: int) -> int | None:
    """Records ever written to the DLQ (the sum of its end offsets over the cluster's
    ``partitions``)."""
    try:
        ends = end_offsets(bootstrap, [(DLQ.name, p) for p in range(DLQ.count(partitions))], 5)
    except Exception:  # noqa: BLE001 - the page shows "unknown" rather than failing
        return None
    return sum(ends.values())


@router.get("/ops")
async def ops_page(request: Request, who: Who) -> Response:
    operator_only(who)
    conf = api_state(request).conf
    rows = await run_in_threadpool(lag.read, conf.bootstrap)
    HISTORY.add(time.time(), rows)
    health: list[tuple[str, str, str]] = []
    async with httpx.AsyncClient(timeout=2) as client:
        answers = await asyncio.gather(*(client.get(url) for url in worker_metrics_urls(
            conf.worker_metrics_port, conf.console_worker_metrics)), return_exceptions=True)
    for answer in answers:
        if isinstance(answer, httpx.Response) and answer.status_code == 200:
            health += [(str(answer.url), series, value) for series, value in _health(answer.text)]
    health_error = None if health else "no worker's /metrics answered"
    backlog: dict[str, Any] = lag.run_backlog(rows, consumer_group(FIRED), FIRED.name)
    return render(request, "ops.html", who, rows=[r.as_dict() for r in rows], backlog=backlog,
                  chart=HISTORY.chart(), health=health, health_error=health_error,
                  dlq=await run_in_threadpool(_dlq_records, conf.bootstrap,
                                                conf.partitions))


@router.get("/topology")
async def topology_page(request: Request, who: Who) -> Response:
    operator_only(who)
    return render(request, "topology.html", who, svg=graph.svg())
