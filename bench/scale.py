"""Schedule scale: N schedules on one worker (or ``--workers``) — load time, memory, and
restart-to-ready.

    .venv/bin/python -m bench.scale [--schedules 1000000] [--cold] [--cron "H H 1 1 *"]
    .venv/bin/python -m bench.scale --jobs 10000000 --workers 2 --no-api --spike 100000

Runs on the real local stack (started if needed) with one worker. N jobs are written straight to
the jobs topic (yearly ``0 0 1 1 *`` schedules, so nothing fires while measuring); "loaded" is
when the worker has consumed them all (the app group's lag on the jobs topic is 0) and indexed
them. Then the worker is stopped and started again and timed until it reports ready (its table
restored from RocksDB plus the changelog's tail, every job indexed): the restart-to-ready
figure. ``--cold`` also wipes the worker's data directory before the restart, so the whole table
comes back from the changelog, as on a machine that takes the partitions over. The benchmark's
jobs are deleted afterwards (tombstones). Target: 1M ready in <= 60 s with RSS <= 2 GiB; the
10M extrapolation assumes the measured per-schedule costs stay linear. Every job gets the same
expression by default, so jobs share their next-slot searches on restart (``streams.scheduling.schedule``
caches them); ``--cron "H H 1 1 *"`` hashes each job's minute and hour, the case where none is
shared.

Then the API, which keeps its own view of the jobs (``streams.runtime.record_stores.SqliteStore``), is
timed from start to healthy twice: with its store wiped (a first start reads the whole topic)
and again (a restart reads only the tail after its checkpoint), with its peak RSS, and one page
of the tenant's 1M jobs and its quota count are timed against that store (``--no-api``: not;
``bench.console --jobs N`` times the API at size). With ``--workers N`` the jobs are loaded on N
workers, every one is restarted at once, and the figures are per worker (the slowest's ready
time, each one's RSS) with their data directories' size on disk (RocksDB: actives and
standbys); ``--spike N`` then makes N more jobs due in one second beside the loaded ones (as
``bench.spike --target kafka``) and reports their fire lag, before the load is deleted.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import shutil
import time
import uuid
from typing import Any

from api.state import jobs_store, jobs_store_path
from bench.common import count_at_least, report, rss_mib, rss_peak_mib, wait_consumed
from bench.spike import load, spike_run
from stack import processes
from stack.local import Stack
from streams.runtime import settings
from streams.runtime.emit import Emitter
from streams.runtime.settings import Settings
from streams.topology import JOBS

WORKER = "worker-1"


def time_api_start(stack: Stack, conf: Settings, wipe: bool) -> tuple[float, float]:
    """Seconds from starting the API to its answering /healthz (its views caught up), and its
    peak RSS in MiB; ``wipe`` empties its jobs store first, as on a new machine."""
    processes.stop(stack.pidfile("api"))
    if wipe:
        path = jobs_store_path(conf)
        for part in path.parent.glob(f"{path.name}*"):  # with its -wal and -shm
            part.unlink()
    started = time.monotonic()
    stack.start_api()
    ready_s = time.monotonic() - started
    pid = processes.alive(stack.pidfile("api"))
    assert pid is not None
    return ready_s, rss_peak_mib(pid)


def time_tenant_reads(conf: Settings, tenant: str, jobs: int) -> tuple[float, float]:
    """Milliseconds for one page (100) of ``tenant``'s job ids and for its quota count (which
    must be ``jobs``), read from the API's store file as the API reads them."""
    store = jobs_store(conf)
    try:
        started = time.perf_counter()
        page = store.keys_for(tenant, None, 100)
        page_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        counted = store.count_for(tenant)
        count_ms = (time.perf_counter() - started) * 1000
    finally:
        store.close()
    assert len(page) == 100 and counted == jobs, (len(page), counted)
    return page_ms, count_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", "--jobs", type=count_at_least(1), default=1_000_000)
    parser.add_argument("--cron", default="0 0 1 1 *",
                        help="the jobs' expression: keep it yearly (nothing may fire while measuring); "
                        "with H every job has its own")
    parser.add_argument("--cold", action="store_true",
                        help="wipe the worker's RocksDB before the restart (changelog recovery)")
    parser.add_argument("--workers", type=count_at_least(1), default=1)
    parser.add_argument("--no-api", action="store_true",
                        help="leave the API out (bench.console times it at size)")
    parser.add_argument("--spike", type=count_at_least(0), default=0,
                        help="with --workers: after the restart, this many more jobs due in one "
                        "second beside the loaded ones, their fire lag reported (0: none)")
    args = parser.parse_args()
    if args.spike and args.workers < 2:
        parser.error("--spike is measured on the restarted workers of --workers N (N >= 2)")
    if args.workers > 1:
        many(args)
        return

    conf = settings.load()
    stack = Stack(conf)
    stack.up(with_app=False)
    processes.stop(stack.pidfile("api"))  # timed on its own below, not while the worker loads
    for name in stack.app_names():  # one worker owns every partition
        if name.startswith("worker-") and name != WORKER:
            processes.stop(stack.pidfile(name))
    stack.start_worker(WORKER)
    pid = processes.alive(stack.pidfile(WORKER))
    assert pid is not None
    rss_before = rss_mib(pid)
    emitter = Emitter(conf.bootstrap, "bench-scale", **{"linger.ms": 50})
    run = uuid.uuid4().hex[:6]
    started = time.monotonic()
    ids = load(emitter, f"scale-{run}", args.schedules, args.cron)
    produced_s = time.monotonic() - started
    wait_consumed(conf.bootstrap, JOBS)
    loaded_s = time.monotonic() - started
    print(f"loaded {len(ids)} schedules: produced in {produced_s:.1f}s, consumed and indexed in "
          f"{loaded_s:.1f}s", flush=True)
    rss_loaded, rss_peak = rss_mib(pid), rss_peak_mib(pid)

    processes.stop(stack.pidfile(WORKER))
    if args.cold:
        shutil.rmtree(conf.home / "workers" / WORKER, ignore_errors=True)
    restart = time.monotonic()
    stack.start_worker(WORKER, ready_timeout_s=1800)
    ready_s = time.monotonic() - restart
    pid = processes.alive(stack.pidfile(WORKER))
    assert pid is not None
    rss_ready = rss_mib(pid)
    print(f"restart to ready: {ready_s:.1f}s", flush=True)

    api_first_s, api_peak = time_api_start(stack, conf, wipe=True)
    api_restart_s, _ = time_api_start(stack, conf, wipe=False)
    page_ms, count_ms = time_tenant_reads(conf, "bench", len(ids))
    store_mib = sum(p.stat().st_size for p in jobs_store_path(conf).parent.glob("*")) / 2**20
    print(f"API ready: {api_first_s:.1f}s from an empty store (peak RSS {api_peak:.0f} MiB), "
          f"{api_restart_s:.1f}s from its checkpoint; a page of 100 of {len(ids)} jobs "
          f"{page_ms:.1f} ms, their count {count_ms:.2f} ms", flush=True)

    for job_id in ids:
        emitter.produce(JOBS, job_id, None)
    emitter.close()

    per_job_kib = max(0.0, (rss_loaded - rss_before) * 1024 / len(ids))
    rate = len(ids) / loaded_s
    ten_m = 10_000_000
    report("scale", {
        "schedules": len(ids),
        "load: produced s": round(produced_s, 1),
        "load: consumed and indexed s": round(loaded_s, 1),
        "load: schedules/s": round(rate),
        "restart-to-ready s" + (" (cold: changelog)" if args.cold else " (warm: RocksDB)"):
            round(ready_s, 1),
        "worker RSS MiB: idle / loaded / after restart": [rss_before, rss_loaded, rss_ready],
        "worker peak RSS MiB": rss_peak,
        "memory per schedule KiB": round(per_job_kib, 2),
        "10M extrapolated: one worker's RSS GiB": round(
            (rss_before + per_job_kib * ten_m / 1024) / 1024, 1),
        "10M extrapolated: restart-to-ready s": round(ready_s * ten_m / len(ids)),
        "10M extrapolated: load at this rate s": round(ten_m / rate),
        "10M plan: workers for ready <= 60 s": max(1, -(-round(ready_s * ten_m / len(ids)) // 60)),
        "partitions now": conf.partitions,
        "API ready s: empty store / from its checkpoint": [round(api_first_s, 1),
                                                            round(api_restart_s, 1)],
        "API peak RSS MiB": api_peak,
        "API jobs store on disk MiB": round(store_mib),
        "10M extrapolated: API ready from an empty store s": round(api_first_s * ten_m / len(ids)),
        "API: a page of 100 of the tenant's jobs ms": round(page_ms, 2),
        "API: the tenant's quota count ms": round(count_ms, 2),
    }, {"schedules": args.schedules, "cold": args.cold, "cron": args.cron})


def many(args: argparse.Namespace) -> None:
    """``--workers N``: the load on N workers, all restarted at once (``main`` for one)."""
    from bench.common import stack_with_workers, wait_standbys

    conf, stack, workers = stack_with_workers(args.workers)
    processes.stop(stack.pidfile("api"))  # not while the workers load
    pids = {name: processes.alive(stack.pidfile(name)) for name in workers}
    rss_before = {name: rss_mib(pid) for name, pid in pids.items() if pid}
    emitter = Emitter(conf.bootstrap, "bench-scale", **{"linger.ms": 50})
    run = uuid.uuid4().hex[:6]
    started = time.monotonic()
    ids = load(emitter, f"scale-{run}", args.schedules, args.cron)
    produced_s = time.monotonic() - started
    emitter.flush(600)
    wait_consumed(conf.bootstrap, JOBS)
    loaded_s = time.monotonic() - started
    print(f"loaded {len(ids)} schedules on {args.workers} workers: produced in {produced_s:.1f}s, "
          f"applied in {loaded_s:.1f}s", flush=True)
    pids = {name: processes.alive(stack.pidfile(name)) for name in workers}
    rss_loaded = {name: rss_mib(pid) for name, pid in pids.items() if pid}
    peak_loaded = {name: rss_peak_mib(pid) for name, pid in pids.items() if pid}
    # the restart is of a cluster at rest: the standby replicas caught up first (faust's
    # standbys read 10M records slower than the load wrote them; a restart that gives a worker
    # the partitions it was a standby for reads the rest from the changelog then, 157 s of the
    # first 10M run's 259)
    standbys_s = wait_standbys(conf, workers)
    for name in workers:
        processes.stop(stack.pidfile(name))
    if args.cold:
        for name in workers:
            shutil.rmtree(conf.home / "workers" / name, ignore_errors=True)
    restart = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(len(workers)) as pool:  # all at once
        list(pool.map(lambda name: stack.start_worker(name, ready_timeout_s=1800), workers))
    ready_s = time.monotonic() - restart
    pids = {name: processes.alive(stack.pidfile(name)) for name in workers}
    rss_ready = {name: rss_mib(pid) for name, pid in pids.items() if pid}
    disk_mib = sum(f.stat().st_size for f in (conf.home / "workers").rglob("*") if f.is_file()) / 2**20
    print(f"restart to ready: {ready_s:.1f}s", flush=True)
    spiked: dict[str, Any] = {}
    if args.spike:  # the loaded jobs idle beside it: bench.spike's run with nothing more loaded
        spiked = spike_run(argparse.Namespace(idle=0, jobs=args.spike, minutes=1), conf, stack,
                           workers, None)
        spiked.pop("idle schedules loaded", None)  # its own: the loaded ones are these
        print(f"spike beside {len(ids):,}: {spiked}", flush=True)
    for job_id in ids:
        emitter.produce(JOBS, job_id, None)
    emitter.close()
    report("scale", {
        "schedules": len(ids), "workers": args.workers,
        "load: produced s": round(produced_s, 1),
        "load: applied s": round(loaded_s, 1),
        "load: schedules/s": round(len(ids) / loaded_s),
        "standby replicas caught up after the load s": round(standbys_s, 1),
        "restart-to-ready s (all at once" + (", cold)" if args.cold else ", warm)"): round(ready_s, 1),
        "worker RSS MiB idle": rss_before, "worker RSS MiB loaded": rss_loaded,
        "worker peak RSS MiB while loading": peak_loaded, "worker RSS MiB after restart": rss_ready,
        "workers' data on disk MiB (RocksDB, actives and standbys)": round(disk_mib),
        "partitions now": conf.partitions,
    } | ({f"spike of {args.spike:,} beside the load": spiked} if args.spike else {}),
        {"schedules": args.schedules, "workers": args.workers, "cold": args.cold, "cron": args.cron,
         "spike": args.spike})


if __name__ == "__main__":
    main()
