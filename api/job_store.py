"""The API's store of the jobs view: the records (``SqliteStore``, indexed by tenant) and, beside
each, what a list at ten million jobs filters and sorts by: the job's state, its next run, its
name, with the number of jobs in each state per tenant kept as they change.

Why kept rather than computed per request: a tenant's list opens on the jobs it runs, soonest
first, with a count per state; computing a state and a next run is ~30 µs a job (the schedule's
cron math), so 10M jobs would take five minutes a page. Kept, a page is a range of an index.

A job's state and next run change with time, not only with its record: a one-off completes
after its slot, a cron's next run moves on at each slot. Each job's facets therefore carry the
moment they go stale (``stale_ms``: its next run, when the next one becomes another), and
``refresh`` recomputes the stale ones, oldest first. The work is one job per slot that passes,
the scheduler's own rate (a 100k-job spike: ~3 s of one core), done by the API's refresher
thread every second and before every filtered read, so a read sees facets current to its
moment. The facets' definitions are the job view's (``slots.job_state``; the next nominal slot
after now, as a job's page previews it), so a list filtered by state agrees with the ``state``
of each job it shows.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streams.runtime import clock
from streams.runtime.codec import codec
from streams.runtime.record_stores import Row, SqliteStore
from streams.scheduling import schedule, slots

log = logging.getLogger(__name__)

STATES = ("active", "paused", "completed")
REFRESH_CHUNK = 500  # jobs recomputed per hold of the store's lock (~20 ms of it)
REFRESH_EVERY_S = 1.0  # the refresher thread's period
# what a filtered read recomputes at most before it answers (~0.6 s): at the top of the hour a
# million hourly jobs go stale at once, and the refresher thread, not one request, works that off
READ_REFRESH_MOST = 20_000
# a job whose last nominal slot has passed while it is still due (jitter, quiet hours): looked at
# again this much later, until it is completed
STILL_DUE_RECHECK_MS = 1000
# rows of an index a filtered page reads at most when a filter is checked row by row (a label
# and a state, a name prefix and a state, two labels): a rare match among millions is a few short
# pages with a cursor (items possibly fewer than limit), not one long scan under the store's lock
SCAN = 5000
MAX_CURSOR = 2000  # characters: a job id (≤ 200 here) and a name (≤ 200), base64 of their JSON

_FACETS = """
CREATE TABLE IF NOT EXISTS facets (
    key TEXT PRIMARY KEY, tenant TEXT NOT NULL, state TEXT NOT NULL, name TEXT NOT NULL,
    next_ms INTEGER NOT NULL, stale_ms INTEGER) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS facets_by_next ON facets (tenant, state, next_ms, key);
CREATE INDEX IF NOT EXISTS facets_by_name ON facets (tenant, name, key);
CREATE INDEX IF NOT EXISTS facets_stale ON facets (stale_ms) WHERE stale_ms IS NOT NULL;
CREATE TABLE IF NOT EXISTS labels (
    key TEXT NOT NULL, label TEXT NOT NULL, value TEXT NOT NULL, tenant TEXT NOT NULL,
    PRIMARY KEY (key, label)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS labels_by_value ON labels (tenant, label, value, key);
CREATE INDEX IF NOT EXISTS labels_by_label ON labels (tenant, label, key);
CREATE TABLE IF NOT EXISTS state_counts (
    tenant TEXT NOT NULL, state TEXT NOT NULL, n INTEGER NOT NULL,
    PRIMARY KEY (tenant, state)) WITHOUT ROWID;
"""


@dataclass(frozen=True)
class Facets:
    """What a list filters and sorts a job by, as of a moment."""

    tenant: str
    state: str  # ``slots.job_state``: active, paused or completed
    name: str
    next_ms: int  # the next nominal slot after the moment; 0 when there is none
    stale_ms: int | None  # when these stop being true; None: not before the record changes
    labels: tuple[tuple[str, str], ...] = ()


def facets_of(job: dict[str, Any], now: int) -> Facets:
    """A job's facets at ``now``. An active or paused job's next run is true until that slot
    passes (then the next is another); a completed job stays completed until its record
    changes."""
    name, labels = job["name"] or "", tuple(sorted(job["labels"].items()))
    following = schedule.next_after(job["schedule"], job["job_id"], now)
    if following is not None:  # due at or after its nominal time: not completed (job_state)
        return Facets(job["tenant"], "paused" if job["paused"] else "active", name, following,
                      following, labels)
    state = slots.job_state(job, now)
    if state == "completed":
        return Facets(job["tenant"], state, name, 0, None, labels)
    # the last slot's nominal time has passed, but it is still due (jitter, quiet hours): a
    # one-off completes just after its due time (held to the end of its quiet hours, if so),
    # a schedule's last slot is looked at again each second until it is done
    return Facets(job["tenant"], state, name, 0, _completes_ms(job, now), labels)


def readable_facets(job: dict[str, Any], now: int) -> Facets:
    """``facets_of``, or, for a record whose schedule cannot be read (written to the topic
    past the API's checks: an unknown zone, a broken expression), facets listing it by its
    paused flag with no next run, looked at again only when its record changes, and a warning
    naming it. One such record must not stop the view (its writes are retried until they
    succeed) nor fail every filtered list."""
    try:
        return facets_of(job, now)
    except Exception as exc:  # noqa: BLE001 - any failure of the schedule's math, see above
        log.warning("job %s tenant %s: schedule unreadable (%s); listed %s with no next run",
                    job["job_id"], job["tenant"], exc, "paused" if job["paused"] else "active")
        return Facets(job["tenant"], "paused" if job["paused"] else "active", job["name"] or "",
                      0, None, tuple(sorted(job["labels"].items())))


def _completes_ms(job: dict[str, Any], now: int) -> int:
    """When facets of a job still due past its last nominal slot must be looked at again: for a
    one-off the moment ``slots.job_state`` calls it completed (not every second of a 10-hour
    quiet-hours hold), for a schedule a second on."""
    at = job["schedule"]["at_ms"]
    if at is None:
        return now + STILL_DUE_RECHECK_MS
    due = max(slots.due_ms(job, at), job["updated_ms"])
    return max(due, slots.held_to_ms(job, at, due)) + 1


def encode_cursor(*parts: str | int) -> str:
    """An opaque page cursor: the sort key of a page's last job."""
    return base64.urlsafe_b64encode(json.dumps(parts).encode()).decode().rstrip("=")


def decode_cursor(cursor: str, types: tuple[type, ...]) -> tuple[Any, ...]:
    """A cursor ``encode_cursor`` made of values of ``types``; ValueError for any other text."""
    if len(cursor) > MAX_CURSOR:
        raise ValueError("not a cursor of this list")
    try:
        parts = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, binascii.Error, RecursionError) as exc:  # "[[[[…": json recurses
        raise ValueError("not a cursor of this list") from exc
    if (not isinstance(parts, list) or len(parts) != len(types)
            or not all(type(p) is t and _storable(p) for p, t in zip(parts, types, strict=True))):
        raise ValueError("not a cursor of this list")
    return tuple(parts)


def _storable(value: object) -> bool:
    """Whether SQLite can bind ``value``: a 64-bit integer, a string that encodes as UTF-8 (JSON
    can spell lone surrogates, SQLite cannot take them)."""
    if isinstance(value, int):
        return -2**63 <= value < 2**63
    try:
        str(value).encode()
    except UnicodeEncodeError:
        return False
    return True


class JobStore(SqliteStore):
    """The jobs view's records and their facets (module docstring). ``now_ms`` is the clock the
    facets are computed by: passed in, so a test moves time without sleeping."""

    SCHEMA = SqliteStore.SCHEMA + _FACETS
    TABLES = (*SqliteStore.TABLES, "facets", "labels", "state_counts")

    def __init__(self, path: Path, now_ms: Callable[[], int] | None = None) -> None:
        super().__init__(path, "Job", "tenant")
        self._now = now_ms or (lambda: clock.now_ms())  # read at each call: tests set it

    def prepare(self, key: str, value: bytes | None) -> Row:
        if value is None:
            return key, None
        job = codec().decode(value)
        return key, (job["tenant"], value, readable_facets(job, self._now()))

    def _keep_more(self, latest: dict[str, Any]) -> None:
        self._set_facets({key: None if kept is None else kept[2] for key, kept in latest.items()})

    def _set_facets(self, facets: dict[str, Facets | None], labels: bool = True) -> None:
        """Write jobs' facets (None: the job is gone), their labels unless ``labels`` is False
        (a refresh: the record, so its labels, did not change), and move the per-state counts
        by the change; inside the caller's transaction, under the lock."""
        self._move_counts("state_counts", ("tenant", "state"),
                          "SELECT key, tenant, state FROM facets",
                          {key: None if f is None else (f.tenant, f.state)
                           for key, f in facets.items()})
        self._db.executemany(
            "INSERT OR REPLACE INTO facets (key, tenant, state, name, next_ms, stale_ms) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [(key, f.tenant, f.state, f.name, f.next_ms, f.stale_ms)
             for key, f in facets.items() if f is not None])
        self._db.executemany("DELETE FROM facets WHERE key = ?",
                             [(key,) for key, f in facets.items() if f is None])
        if labels:
            self._db.executemany("DELETE FROM labels WHERE key = ?", [(k,) for k in facets])
            self._db.executemany(
                "INSERT INTO labels (key, label, value, tenant) VALUES (?, ?, ?, ?)",
                [(key, label, value, f.tenant) for key, f in facets.items() if f is not None
                 for label, value in f.labels])

    def refresh(self, now: int | None = None, most: int | None = None,
                stopping: Callable[[], bool] = lambda: False) -> int:
        """Recompute the jobs' facets gone stale by ``now`` (default: the clock's now), a chunk
        per hold of the lock, oldest first, until none is left, ``most`` are done or
        ``stopping()``; how many were recomputed. Reads and writes of a chunk share one hold,
        so a record written meanwhile is never overwritten by facets of its previous version."""
        at = self._now() if now is None else now
        done = 0
        while (most is None or done < most) and not stopping():
            with self._lock:
                rows = self._db.execute(
                    "SELECT f.key, r.value FROM facets f JOIN records r ON r.key = f.key "
                    "WHERE f.stale_ms <= ? ORDER BY f.stale_ms LIMIT ?",
                    (at, REFRESH_CHUNK)).fetchall()
                if not rows:
                    return done
                with self._transaction():
                    self._set_facets({key: readable_facets(codec().decode(value), at)
                                      for key, value in rows}, labels=False)
            done += len(rows)
        return done

    def state_counts(self, tenant: str) -> dict[str, int]:
        """The tenant's jobs in each state (kept by every write and refresh)."""
        with self._lock:
            found = dict(self._db.execute(
                "SELECT state, n FROM state_counts WHERE tenant = ?", (tenant,)))
        return {state: int(found.get(state, 0)) for state in STATES}

    def by_next_run(self, tenant: str, state: str, after: tuple[int, str] | None, limit: int
                    ) -> list[tuple[str, int]]:
        """Up to ``limit`` (key, next run) of the tenant's jobs in ``state``, soonest next run
        first (a completed job has none: those in id order), after the cursor ``after``."""
        next_ms, key = after if after is not None else (-1, "")
        with self._lock:
            return self._db.execute(
                "SELECT key, next_ms FROM facets WHERE tenant = ? AND state = ? "
                "AND (next_ms, key) > (?, ?) ORDER BY next_ms, key LIMIT ?",
                (tenant, state, next_ms, key, limit)).fetchall()

    def by_name(self, tenant: str, prefix: str, state: str | None,
                after: tuple[str, str] | None, limit: int
                ) -> tuple[list[tuple[str, str]], tuple[str, str] | None]:
        """Up to ``limit`` (key, name) of the tenant's jobs whose name starts with ``prefix``
        (and in ``state``, if given), in name order, after the cursor ``after``; and the cursor
        of the next page (None: none). With a state, at most ``SCAN`` names are read a page."""
        name, key = after if after is not None else (prefix, "")
        # from the cursor (its row value starts the index range: a page deep is no slower than
        # the first) to the last name with the prefix
        found = ("SELECT key, name, state FROM facets WHERE tenant = ? AND (name, key) > (?, ?) "
                 "AND name < ? ORDER BY name, key LIMIT ?")
        with self._lock:
            rows = self._db.execute(found, (tenant, name, key, past_prefix(prefix),
                                            limit if state is None else SCAN)).fetchall()
        return _bounded([((k, n), (n, k)) for k, n, s in rows if state in (None, s)],
                        [(n, k) for k, n, _ in rows], limit if state is None else SCAN, limit)

    def by_labels(self, tenant: str, labels: list[tuple[str, str | None]], state: str | None,
                  name: str | None, after: str | None, limit: int
                  ) -> tuple[list[str], str | None]:
        """Up to ``limit`` keys of the tenant's jobs carrying every label of ``labels`` (key and
        value, or a key with None: any value), in ``state`` and with a name starting with
        ``name`` when given, in key order after ``after``; and the cursor of the next page
        (None: none). The first label with a value is read from its index, a range in key
        order; with only that label, a page is that range; with more filters, at most ``SCAN``
        of the range's jobs are checked a page."""
        first, *rest = sorted(labels, key=lambda kv: kv[1] is None)
        where = ["l.tenant = ?", "l.label = ?", "l.key > ?"]
        args: list[Any] = [tenant, first[0], after or ""]
        if first[1] is not None:
            where.append("l.value = ?")
            args.append(first[1])
        checked = bool(rest) or state is not None or name is not None
        scan = SCAN if checked else limit
        candidates = (f"SELECT l.key FROM labels l WHERE {' AND '.join(where)} "
                      "ORDER BY l.key LIMIT ?")
        checks, check_args = [], []
        for label, value in rest:
            checks.append("EXISTS (SELECT 1 FROM labels m WHERE m.key = c.key AND m.label = ?"
                          + (" AND m.value = ?)" if value is not None else ")"))
            check_args += [label] if value is None else [label, value]
        if state is not None:
            checks.append("f.state = ?")
            check_args.append(state)
        if name is not None:
            checks.append("f.name >= ? AND f.name < ?")
            check_args += [name, past_prefix(name)]
        join = " JOIN facets f ON f.key = c.key" if state is not None or name is not None else ""
        matching = (f"SELECT c.key FROM ({candidates}) c{join}"
                    + (f" WHERE {' AND '.join(checks)}" if checks else "") + " ORDER BY c.key")
        with self._lock:
            scanned = [row[0] for row in self._db.execute(candidates, (*args, scan))]
            keys = [row[0] for row in self._db.execute(matching, (*args, scan, *check_args))
                    ] if checked else scanned
        return _bounded([(k, k) for k in keys], scanned, scan, limit)


def past_prefix(prefix: str) -> str:
    """A text every name starting with ``prefix`` sorts before: the prefix and a code point
    above any (``\U0010ffff`` itself is the highest: a name holding it right after the prefix
    is missed)."""
    return prefix + "\U0010ffff"


def _bounded(matched: list[tuple[Any, Any]], scanned: list[Any], scan: int, limit: int
             ) -> tuple[list[Any], Any | None]:
    """A page of at most ``limit`` of ``matched`` ((item, its cursor) pairs in index order, out
    of the ``scanned`` cursors read with a budget of ``scan`` rows) and the next page's cursor:
    the last item's when the page is full, the last row read when the budget ran out first (a
    short page, more to read), else None."""
    if len(matched) >= limit:
        return [item for item, _ in matched[:limit]], matched[limit - 1][1]
    return [item for item, _ in matched], scanned[-1] if len(scanned) == scan else None


class Refresher:
    """The API's thread that keeps the facets current (``JobStore.refresh`` every second)."""

    def __init__(self, store: JobStore, every_s: float = REFRESH_EVERY_S) -> None:
        self._store, self._every_s = store, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job-facets", daemon=True)

    def start(self) -> Refresher:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                self._store.refresh(stopping=self._stop.is_set)
            except Exception:  # a full disk, a closed store at exit: try again next second
                log.exception("job facets: refresh failed")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
