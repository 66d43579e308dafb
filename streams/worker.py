"""The composition root of a cronstream worker: the only module that imports the agents.

``cronstream worker`` runs :func:`main`. It makes sure the topics exist, registers the agents of
every sub-topology (``streams.topology`` is the map: scheduling, execution, campaigns, the commit
watch), serves the worker's health and metrics, and hands control to faust.
"""

from __future__ import annotations

import gc
import os

# a worker's heap is mostly long-lived (faust, clients, tables' caches) and every full collection
# walked all of it for nothing (100-300 ms, "0 collected", during spikes): fewer young collections,
# and the heap as recovered is frozen out of them (streams.scheduling.scheduler)
GC_THRESHOLDS = (20_000, 20, 20)


def main() -> None:
    """Run one worker: scheduler, executor and fan-out agents on one faust app."""
    from streams.campaigns import fanout  # noqa: F401  (agents register)
    from streams.execution import executor  # noqa: F401  (agents register)
    from streams.runtime import admin, commit_watch, metrics  # noqa: F401  (agents register)
    from streams.runtime.app import HEALTH, SETTINGS, WORKER_ID, app, ready_file
    from streams.scheduling import scheduler  # noqa: F401  (agents register)

    admin.ensure_topics(SETTINGS.bootstrap)
    admin.seed_group_offsets(SETTINGS.bootstrap)
    metrics.watch_gc()
    gc.set_threshold(*GC_THRESHOLDS)
    metrics.serve(HEALTH, os.environ.get("CRONSTREAM_WORKER_METRICS_HOST", "127.0.0.1"),
                  SETTINGS.worker_metrics_port)
    ready_file(WORKER_ID).unlink(missing_ok=True)
    (SETTINGS.home / "workers").mkdir(parents=True, exist_ok=True)
    app.main()
