"""A real peer on the same machine: db-scheduler doing cronstream's webhook spike.

    .venv/bin/python -m bench.peer [--jobs 100000] [--idle 1000000] [--instances 2] [--threads 40]
                                   [--polling-ms 200] [--lower 1.0] [--upper 4.0] [--warmup 0]

db-scheduler (Java, ``com.github.kagkarlsson:db-scheduler`` from Maven Central, built from
``bench/peer/`` with the machine's Maven, cached under ``$CRONSTREAM_HOME/peer``) on the local
stack's PostgreSQL (started if needed; its own database, ``cronstream_peer``): N one-time tasks
due in the same second beside M idle ones (due in 2100), scheduled through db-scheduler's own
``SchedulerClient.scheduleBatch``; ``--instances`` schedulers of ``--threads`` threads each, polling
with ``pollUsingLockAndFetch(lower, upper)`` every ``--polling-ms``; each task POSTs to the
benchmark's webhook receiver (``bench.receiver``, its own process) with ``X-Cronstream-Fire-Id``
(the task instance id) and ``X-Cronstream-Nominal-Time``, through ``java.net.http.HttpClient``
(HTTP/1.1, keep-alive), as an application using db-scheduler would. Figures from the receiver's
arrivals (``bench.runs``): run lag (arrival − due time) p50/p99/max, runs/s, missing, duplicates;
and the CPU each component used from a second before the due time to the last arrival.

``run_peer`` is the whole run for a caller that has a receiver and a stack already
(``bench.spike`` runs it after cronstream's spike, in the same command).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import select
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psycopg

from bench.common import count_at_least, cpu_seconds, cpu_share, report
from bench.receiver import Receiver
from bench.runs import missing, run_figures
from stack.local import Stack, StackError
from streams.runtime import settings
from streams.runtime.settings import REPO_ROOT, Settings

PEER_DIR = REPO_ROOT / "bench" / "peer"
MAIN_CLASS = "io.cronstream.peer.Main"
DATABASE = "cronstream_peer"
DB_SCHEDULER = "16.12.0"  # bench/peer/pom.xml's db-scheduler.version, printed with the figures
JVM = ["-Xmx512m", "-XX:+UseG1GC"]
SCHEDULE_RATE = 5_000  # spike tasks/s the schedule step is assumed to insert at, to plan the due time
DUE_MARGIN_S = 10  # plus: the instances are up before it
RUNS_WAIT_S = 600  # how long after the due time the runs are waited for
CPU_BEFORE_S = 1.0  # the CPU window starts this long before the due time
# connections per instance: a thread each plus 4 (poller, heartbeats, housekeeper), at most this
# many: the stack's PostgreSQL takes 100 in all (initdb's default) and Connect and the API use some
MAX_POOL = 40


# Tuned on 5,000-task spikes (2026-11-25, 2 instances, lock-and-fetch 1.0/4.0, the box shared with
# a test suite): cold JVMs 1,008 runs/s at 10 threads, 1,271 at 20, 1,525-1,683 at 40, 1,449-1,766
# at 80, 1,686 at 160; warmed up 2,343 at 20, 2,497 at 40, 1,834 at 80; polling every 200 ms
# instead of 1 s took the first poll after the due time ~0.6 s earlier (run lag p50 1.9 -> 1.2 s).
TUNED_THREADS = 40
TUNED_POLLING_MS = 200


def pool_size(threads: int) -> int:
    return min(threads + 4, MAX_POOL)


def peer_home(conf: Settings) -> Path:
    return conf.home / "peer"


def ensure_built(conf: Settings) -> str:
    """The peer's classpath: ``bench/peer`` built with Maven once per content of its pom and
    sources (a marker under ``$CRONSTREAM_HOME``, as the stack's Java parts are), the jars in
    ``$CRONSTREAM_HOME/peer/lib``."""
    lib = peer_home(conf) / "lib"
    sources = [PEER_DIR / "pom.xml", *sorted((PEER_DIR / "src").rglob("*"))]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources if p.is_file())).hexdigest()[:16]
    marker = conf.home / f".peer-{digest}"
    if marker.exists():
        return f"{lib}/*"
    if shutil.which("mvn") is None or shutil.which("java") is None:
        raise StackError("peer", "java and mvn (Maven) must be on PATH")
    shutil.rmtree(lib, ignore_errors=True)  # no jar of an older version left on the classpath
    conf.log_dir.mkdir(parents=True, exist_ok=True)
    log = conf.log_dir / "maven-peer.log"
    print(f"[peer] building bench/peer (db-scheduler {DB_SCHEDULER}) with Maven (once; log: {log})",
          flush=True)
    with open(log, "ab") as out:
        rc = subprocess.call(["mvn", "-B", "-q", "-f", str(PEER_DIR / "pom.xml"), "package",
                              f"-Dpeer.dir={peer_home(conf)}"], stdout=out, stderr=subprocess.STDOUT)
    if rc != 0:
        raise StackError("maven", f"building bench/peer failed (exit {rc})", log)
    for old in conf.home.glob(".peer-*"):
        old.unlink()
    marker.write_text("ok\n")
    return f"{lib}/*"


def jdbc_url(conf: Settings) -> str:
    return f"jdbc:postgresql://127.0.0.1:{conf.pg_port}/{DATABASE}?user=cronstream"


def ensure_database(conf: Settings) -> None:
    """The stack's PostgreSQL up, with the peer's own database in it."""
    Stack(conf).start_postgres()
    with psycopg.connect(conf.pg_dsn.replace("dbname=cronstream", "dbname=postgres"),
                         autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone():
            conn.execute(f"CREATE DATABASE {DATABASE}")


def postgres_pid(conf: Settings) -> int | None:
    postmaster = conf.home / "postgres" / "data" / "postmaster.pid"
    return int(postmaster.read_text().split()[0]) if postmaster.exists() else None


def java(classpath: str, *args: str) -> list[str]:
    return ["java", *JVM, "-cp", classpath, MAIN_CLASS, *args]


def schedule(conf: Settings, classpath: str, prefix: str, *, jobs: int = 0, due_s: int | None = None,
             idle: int = 0, fresh: bool = False) -> dict[str, Any]:
    """Run ``Main schedule``: its JSON line of figures."""
    args = ["schedule", "--jdbc", jdbc_url(conf), "--prefix", prefix, "--jobs", str(jobs),
            "--idle", str(idle)]
    if due_s is not None:
        args += ["--due-epoch-s", str(due_s)]
    if fresh:
        args.append("--fresh")
    done = subprocess.run(java(classpath, *args), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"peer schedule failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def spike_ids(prefix: str, jobs: int) -> list[str]:
    """The task instance ids ``Main schedule`` gives the spike's tasks (``%s-%07d``)."""
    return [f"{prefix}-{i:07d}" for i in range(jobs)]


def plan_due(now_s: float, jobs: int) -> int:
    """The epoch second the spike's tasks are due at: after they can be inserted and the
    instances are up (``SCHEDULE_RATE``, ``DUE_MARGIN_S``)."""
    return math.ceil(now_s + jobs / SCHEDULE_RATE + DUE_MARGIN_S)


@dataclass
class Instance:
    """One db-scheduler instance (``Main run``), a child process: started, told to stop by
    closing its stdin, its summary line read."""
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    _pending: bytes = field(default=b"", repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def line(self, timeout_s: float) -> str:
        out: IO[bytes] | None = self.proc.stdout
        assert out is not None
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out.fileno()], [], [], left)[0]:
                raise TimeoutError(f"peer {self.name} said nothing in {timeout_s} s (log: {self.log})")
            chunk = os.read(out.fileno(), 4096)
            if not chunk:
                raise RuntimeError(f"peer {self.name} ended (exit {self.proc.wait()}; log: {self.log})")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode()

    def stop(self, timeout_s: float = 60.0) -> dict[str, Any] | None:
        """Close its stdin (it stops its scheduler and prints its summary); its summary, or None
        if it had to be killed."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        summary = None
        try:
            summary = json.loads(self.line(timeout_s))
            self.proc.wait(timeout_s)
        except (TimeoutError, RuntimeError, ValueError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return summary


def start_instances(conf: Settings, classpath: str, count: int, threads: int, receiver_url: str,
                    polling_ms: int, lower: float, upper: float) -> list[Instance]:
    """``count`` instances, each ready (its scheduler started) when this returns."""
    conf.log_dir.mkdir(parents=True, exist_ok=True)
    started = []
    for i in range(1, count + 1):
        name = f"peer-{i}"
        log = conf.log_dir / f"{name}.log"
        with open(log, "ab") as err:
            proc = subprocess.Popen(
                java(classpath, "run", "--jdbc", jdbc_url(conf), "--name", name,
                     "--threads", str(threads), "--pool", str(pool_size(threads)),
                     "--receiver", receiver_url,
                     "--polling-ms", str(polling_ms), "--lower", str(lower), "--upper", str(upper)),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, start_new_session=True)
        started.append(Instance(name, proc, log))
    try:
        for instance in started:
            if (said := instance.line(60)) != "ready":
                raise RuntimeError(f"peer {instance.name} said {said!r}, not ready (log: {instance.log})")
    except Exception:
        for instance in started:
            instance.stop(5)
        raise
    return started


def wait_arrivals(receiver: Receiver, before: int, jobs: int, deadline_s: float,
                  every_s: float = 0.25) -> int:
    """Requests the receiver got since it had ``before``, once there are ``jobs`` of them or
    the wall clock passes ``deadline_s``."""
    while True:
        got = receiver.count()[0] - before
        if got >= jobs or time.time() >= deadline_s:
            return got
        time.sleep(every_s)


def truncate(conf: Settings) -> None:
    with psycopg.connect(conf.pg_dsn.replace("dbname=cronstream", f"dbname={DATABASE}"),
                         autocommit=True) as conn:
        conn.execute("TRUNCATE scheduled_tasks")


def warm(conf: Settings, classpath: str, receiver: Receiver, prefix: str, tasks: int,
         wait_s: float) -> None:
    """A smaller spike first, not measured: the instances' JVMs compile the code paths a spike
    takes (a long-running application's have), as cronstream's second spike of a run is a
    stack's that has run one before."""
    due_s = plan_due(time.time(), tasks)
    base = receiver.count()[0]
    schedule(conf, classpath, prefix, jobs=tasks, due_s=due_s)
    got = wait_arrivals(receiver, base, tasks, due_s + wait_s)
    print(f"[peer] warm-up: {got:,} of {tasks:,} tasks ran", flush=True)


def run_peer(conf: Settings, jobs: int, instances: int, threads: int, receiver: Receiver, *,
             idle: int = 0, polling_ms: int = TUNED_POLLING_MS, lower: float = 1.0, upper: float = 4.0,
             warmup: int = 0, wait_s: float = RUNS_WAIT_S,
             bystanders: dict[str, int] | None = None) -> dict[str, Any]:
    """db-scheduler's spike against ``receiver`` (started, shared with other runs: only this
    run's fire ids are counted): its figures. With ``warmup``, a spike of that many tasks runs
    first, unmeasured, on the same instances. ``bystanders`` (name -> root pid: processes that
    are not the peer's, such as cronstream's idle stack in ``bench.spike``) have their cores read
    in the same window, to show whether they took any from the peer; they are left out of the
    CPU per run."""
    classpath = ensure_built(conf)
    ensure_database(conf)
    prefix = f"peer-{uuid.uuid4().hex[:6]}"
    loaded_idle = schedule(conf, classpath, prefix, idle=idle, fresh=True)
    idle_s = loaded_idle["idle_s"]
    running = start_instances(conf, classpath, instances, threads, receiver.url, polling_ms, lower,
                              upper)
    try:
        if warmup:
            warm(conf, classpath, receiver, f"{prefix}-warmup", warmup, wait_s)
        due_s = plan_due(time.time(), jobs)
        loaded = schedule(conf, classpath, prefix, jobs=jobs, due_s=due_s)
        print(f"[peer] {idle:,} idle tasks scheduled in {idle_s:.1f} s, {jobs:,} due at {due_s} in "
              f"{loaded['jobs_s']:.1f} s ({due_s - time.time():.1f} s from now); rows as "
              f"SchedulerClient.schedule writes them: {loaded['rows_as_schedule_writes']}", flush=True)
        if time.time() > due_s - CPU_BEFORE_S:
            raise SystemExit(f"the peer's tasks were scheduled slower than {SCHEDULE_RATE}/s and "
                             "their due time has come; nothing measured (lower --jobs)")
        roots = {instance.name: instance.pid for instance in running} | {"receiver": receiver.pid}
        if (pid := postgres_pid(conf)) is not None:
            roots["postgres"] = pid
        own = set(roots)
        roots = (bystanders or {}) | roots
        base = receiver.count()[0]
        time.sleep(max(0.0, due_s - CPU_BEFORE_S - time.time()))
        cpu_before, before_at = cpu_seconds(roots), time.monotonic()
        got = wait_arrivals(receiver, base, jobs, due_s + wait_s)
        cpu_after, after_at = cpu_seconds(roots), time.monotonic()
    finally:
        summaries = [instance.stop() for instance in running]
    arrivals = [(fire_id, at) for fire_id, at in receiver.dump().pairs
                if not fire_id.startswith(f"{prefix}-warmup-")]
    truncate(conf)
    expected = dict.fromkeys(spike_ids(prefix, jobs), due_s * 1000)
    figures = run_figures(arrivals, expected)
    absent = missing(arrivals, expected)
    used = {name: round(cpu_after[name] - cpu_before.get(name, 0.0), 2) for name in cpu_after
            if name in own}
    received = figures["runs received"] or 1
    return {
        "peer": f"db-scheduler {DB_SCHEDULER}, {instances} instances x {threads} threads "
                f"({pool_size(threads)} connections each), pollUsingLockAndFetch({lower}, {upper}), "
                f"polling every {polling_ms} ms",
        "tasks due in the same second": jobs,
        "idle tasks": idle,
        "warm-up spike before (tasks)": warmup,
        "schedule: idle s": round(idle_s, 1),
        "schedule: spike tasks s": loaded["jobs_s"],
        "rows as SchedulerClient.schedule writes them": loaded["rows_as_schedule_writes"],
        **figures,
        "requests at the receiver in the wait": got,
        "missing (first 5)": absent[:5],
        "instances' own count (ok, failed), warm-up included":
            [(s["ok"], s["failed"]) if s else None for s in summaries],
        f"cores used from {CPU_BEFORE_S:.0f} s before due to the last arrival":
            cpu_share(cpu_before, cpu_after, after_at - before_at),
        "CPU ms per run": {name: round(seconds * 1000 / received, 3) for name, seconds in used.items()},
        "CPU window s": round(after_at - before_at, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=count_at_least(1), default=100_000)
    parser.add_argument("--idle", type=count_at_least(0), default=1_000_000,
                        help="one-time tasks due in 2100 in the same table (bench.spike's default)")
    parser.add_argument("--instances", type=count_at_least(1), default=2)
    parser.add_argument("--threads", type=count_at_least(1), default=TUNED_THREADS,
                        help="execution threads per instance (db-scheduler's .threads)")
    parser.add_argument("--polling-ms", type=count_at_least(1), default=TUNED_POLLING_MS,
                        help="db-scheduler's pollingInterval (its default is 10 s)")
    parser.add_argument("--warmup", type=count_at_least(0), default=0,
                        help="tasks of an unmeasured spike run first on the same instances (their "
                             "JVMs compile the spike's code paths); 0: the measured spike is their "
                             "first")
    parser.add_argument("--lower", type=float, default=1.0,
                        help="pollUsingLockAndFetch's lowerLimitFractionOfThreads")
    parser.add_argument("--upper", type=float, default=4.0,
                        help="pollUsingLockAndFetch's executionsPerBatchFractionOfThreads")
    args = parser.parse_args()
    conf = settings.load()
    with Receiver() as receiver:
        figures = run_peer(conf, args.jobs, args.instances, args.threads, receiver, idle=args.idle,
                           polling_ms=args.polling_ms, lower=args.lower, upper=args.upper,
                           warmup=args.warmup)
        figures["receiver event loop"] = receiver.loop
    report("peer", figures, {"jobs": args.jobs, "idle": args.idle, "instances": args.instances,
                             "threads": args.threads, "polling_ms": args.polling_ms,
                             "lower": args.lower, "upper": args.upper, "warmup": args.warmup,
                             "db-scheduler": DB_SCHEDULER})


if __name__ == "__main__":
    main()
