"""The composition root of a cronstream worker: the only module that imports the agents.

``cronstream worker`` runs :func:`main`. It builds the faust app (``streams.runtime.app``), makes
sure the topics exist, registers every sub-topology on it (``streams.topology`` is the map) and
wires them to each other, serves the worker's health and metrics, and hands control to faust.

Wiring, in the order the data flows::

    campaigns.fanout   <- execution.executor (a campaign's tick becomes its fan-out)
    execution.executor <- scheduling.agents (what is done, what runs: the reconciler's view)
    scheduling.agents  <- execution.executor (a slot's outcome on the ledger, in-process)
    scheduling.agents  <-> scheduling.imports (the window of copies not applied yet)

each hand-off between scheduling and execution typed once, in ``streams.handoff``,

so scheduling imports neither execution nor campaigns, and execution does not import campaigns
(the layering contract in pyproject.toml checks it).
"""

from __future__ import annotations

import gc
import logging

from streams.campaigns import fanout
from streams.execution import executor, reminder_opt_outs
from streams.handoff import Gate
from streams.runtime import admin, authority, commit_watch, metrics, settings
from streams.runtime.app import Runtime, build
from streams.scheduling import agents, imports

log = logging.getLogger(__name__)

# a worker's heap is mostly long-lived (faust, clients, tables' caches) and every full collection
# walked all of it for nothing (100-300 ms, "0 collected", during spikes): fewer young collections,
# and the heap as recovered is frozen out of them (streams.scheduling.agents)
GC_THRESHOLDS = (20_000, 20, 20)


def wire(rt: Runtime) -> None:
    """Register every sub-topology on ``rt``'s app and hand each what it needs of the others."""
    deciding = Gate()  # the scheduler decides a burst before the executor runs it
    campaigns = fanout.register(rt)
    # reminder emails honour the tenant's suppressions, read from a view of the whole topic
    lookup = reminder_opt_outs.Suppressions(
        rt.settings.bootstrap, rt.settings.home / "workers" / f"{rt.worker_id}-suppressions.sqlite3")
    runs = executor.register(rt, fan_out=campaigns.fan_out, deciding=deciding, suppressions=lookup,
                             suppress=campaigns.suppress)
    window = imports.ImportWindow()  # the import copier's copies apply_jobs has not applied
    schedule = agents.register(rt, runs, deciding, window)
    runs.decisions = schedule  # an outcome on the ledger resolves its slot

    imports.register(rt, window)
    commit_watch.register(rt.app)


def main() -> None:
    """Run one worker: scheduler, executor and fan-out agents on one faust app."""
    conf = settings.check_or_exit("worker")  # every setting's problem, one line each, now
    if conf.event_loop == "uvloop":  # before faust makes its loops (its own and its consumer's)
        import uvloop

        uvloop.install()
    admin.check_reachable(conf.bootstrap)  # a wrong password or CA: one clear line, no hang
    problem = admin.group_session_problem(conf.bootstrap, conf.group_session[0])
    if problem is not None:
        raise settings.SettingsError(problem)
    rt = build(conf, conf.worker_id,
               replication_factor=admin.replication(conf.bootstrap).factor)
    if conf.region is not None:  # two regions: sends only under the region's lease
        lease, margin, renew = conf.region_lease
        held = authority.RegionLease(authority.Store(conf.authority_dsn), conf.region,
                                     lease_s=lease, margin_s=margin, renew_s=renew)
        held.start()
        rt.region = held
    wire(rt)
    admin.ensure_topics(conf.bootstrap, partitions=conf.partitions)
    # topics made before the replication setting (or by someone else) are reported, in the log
    # and in /readyz, never silently taken (streams.runtime.admin.replication_shortfall)
    rt.health.replication = admin.replication_shortfall(conf.bootstrap)
    for problem in rt.health.replication:
        log.warning("under-replicated topic: %s", problem)
    admin.seed_group_offsets(conf.bootstrap)
    metrics.watch_gc()
    gc.set_threshold(*GC_THRESHOLDS)
    metrics.serve(rt.health, conf.worker_metrics_host, conf.worker_metrics_port)
    rt.ready_file().unlink(missing_ok=True)
    (conf.home / "workers").mkdir(parents=True, exist_ok=True)
    rt.app.main()
