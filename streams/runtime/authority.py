"""The active-region authority in the PostgreSQL of record, and a worker's hold on its lease
(docs/regions.md).

``Store`` keeps ``streams.runtime.region``'s row in ``region_authority`` and applies each of its
transitions as a compare-and-set: the row is read under its lock (``FOR UPDATE``; ``FOR SHARE``
for a reservation, so reservations do not wait for each other but a promotion waits for them and
then sees them), the time is the server's (``clock_timestamp()``), the pure transition decides,
and the result is written in the same transaction. One PostgreSQL primary serializes every
change: that is the whole of the authority's safety when the regions cannot see each other.

``RegionLease`` is a worker's side: a thread renews every ``renew_s``, and the sends ask
``holds()`` (the epoch a send may start under now, or None) on the worker's monotonic clock.
``NoRegion`` is the one-region deployment's: every send may start, under epoch 0, which no send
carries.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import psycopg

from streams.runtime import region
from streams.runtime.region import Authority, LeaseClock, Promotion, Refused

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS region_authority (
  id smallint PRIMARY KEY CHECK (id = 1),
  epoch bigint NOT NULL,
  active text NOT NULL,
  lease_until_ms bigint NOT NULL,
  draining boolean NOT NULL DEFAULT false,
  horizon_ms bigint NOT NULL DEFAULT 0,
  changed_ms bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS region_epochs (
  epoch bigint PRIMARY KEY,
  region text NOT NULL,
  began_ms bigint NOT NULL,
  kind text NOT NULL,
  deposed text,
  horizon_ms bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS region_reservations (
  campaign_id text NOT NULL,
  part int NOT NULL,
  hwm_seq bigint NOT NULL,
  epoch bigint NOT NULL,
  inherited_hwm bigint,
  PRIMARY KEY (campaign_id, part)
);
"""
COLUMNS = "epoch, active, lease_until_ms, draining, horizon_ms, changed_ms"
NOW_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
# a statement or lock wait past this fails the call (a renewal retries at its next turn)
STATEMENT_TIMEOUT_MS = 3000


class Store:
    """The authority's tables through one connection (made again after a failure), serialised
    by a lock: a worker's lease thread has its own, its walkers share another."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self.dsn, connect_timeout=3,
                options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS} "
                        f"-c lock_timeout={STATEMENT_TIMEOUT_MS}")
        return self._conn

    def _run(self, work: Callable[[psycopg.Cursor[Any]], Any]) -> Any:
        """``work`` in one transaction; a failed connection is dropped for the next call."""
        with self._lock:
            conn = self._connection()
            try:
                with conn.transaction(), conn.cursor() as cur:
                    return work(cur)
            except Refused:
                raise
            except Exception:
                conn.close()
                raise

    def initialise(self, active: str) -> Authority:
        """The tables, and the first row (``active`` under epoch 1) unless there is one."""
        def work(cur: psycopg.Cursor[Any]) -> Authority:
            cur.execute(SCHEMA)
            found = _row(cur, "")
            if found is not None:
                return found
            first = region.first(active, _now(cur))
            _write(cur, first, insert=True)
            cur.execute("INSERT INTO region_epochs (epoch, region, began_ms, kind) VALUES "
                        "(%s, %s, %s, 'first') ON CONFLICT DO NOTHING",
                        (first.epoch, active, first.changed_ms))
            return first
        result: Authority = self._run(work)
        return result

    def read(self) -> Authority | None:
        found: Authority | None = self._run(lambda cur: _row(cur, ""))
        return found

    def now_ms(self) -> int:
        """The authority's clock."""
        now: int = self._run(_now)
        return now

    def transact(self, change: Callable[[Authority | None, int], Authority]) -> Authority:
        """One compare-and-set: ``change(row, server now)`` under the row's lock, written back."""
        def work(cur: psycopg.Cursor[Any]) -> Authority:
            after = change(_row(cur, " FOR UPDATE"), _now(cur))
            _write(cur, after)
            return after
        result: Authority = self._run(work)
        return result

    def renew(self, name: str, epoch: int | None, lease_ms: int) -> Authority:
        return self.transact(lambda row, now: region.renew(row, name, epoch, now, lease_ms))

    def begin_handover(self, epoch: int) -> Authority:
        return self.transact(lambda row, now: region.begin_handover(row, epoch, now))

    def promote(self, to: str, epoch: int, *, planned: bool) -> Promotion:
        """The promotion's transaction: the new epoch, its history row and, unplanned, every
        reservation's ``inherited_hwm`` raised to what the deposed region had reserved."""
        def work(cur: psycopg.Cursor[Any]) -> Promotion:
            done = region.promote(_row(cur, " FOR UPDATE"), to, epoch, _now(cur), planned=planned)
            _write(cur, done.row)
            cur.execute("INSERT INTO region_epochs (epoch, region, began_ms, kind, deposed, "
                        "horizon_ms) VALUES (%s, %s, %s, %s, %s, %s)",
                        (done.row.epoch, to, done.row.changed_ms,
                         "planned" if planned else "unplanned", done.deposed,
                         done.row.horizon_ms))
            if not planned:
                cur.execute("UPDATE region_reservations SET inherited_hwm = "
                            "GREATEST(COALESCE(inherited_hwm, -1), hwm_seq)")
            return done
        result: Promotion = self._run(work)
        return result

    def reserve(self, name: str, epoch: int, campaign_id: str, part: int, up_to: int) -> int:
        """Let ``name``'s walkers under ``epoch`` send the partition's chunks up to seq
        ``up_to``; the reservation's ``hwm_seq`` after it (never lowered)."""
        def work(cur: psycopg.Cursor[Any]) -> int:
            region.reservable(_row(cur, " FOR SHARE"), name, epoch, _now(cur))
            cur.execute(
                "INSERT INTO region_reservations AS r (campaign_id, part, hwm_seq, epoch) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (campaign_id, part) DO UPDATE SET "
                "hwm_seq = GREATEST(r.hwm_seq, EXCLUDED.hwm_seq), epoch = EXCLUDED.epoch "
                "RETURNING hwm_seq", (campaign_id, part, up_to, epoch))
            got = cur.fetchone()
            assert got is not None
            return int(got[0])
        hwm: int = self._run(work)
        return hwm

    def reservations(self, campaign_id: str | None = None) -> list[tuple[str, int, int, int | None]]:
        """(campaign, partition, hwm_seq, inherited_hwm) rows, of one campaign or all."""
        def work(cur: psycopg.Cursor[Any]) -> list[tuple[str, int, int, int | None]]:
            cur.execute("SELECT campaign_id, part, hwm_seq, inherited_hwm FROM "
                        "region_reservations WHERE %s::text IS NULL OR campaign_id = %s "
                        "ORDER BY campaign_id, part", (campaign_id, campaign_id))
            return [(str(c), int(p), int(h), None if i is None else int(i))
                    for c, p, h, i in cur.fetchall()]
        rows: list[tuple[str, int, int, int | None]] = self._run(work)
        return rows

    def inherited(self, campaign_id: str) -> dict[int, int]:
        """Per recipient partition of the campaign, the highest chunk a deposed region may have
        sent (``region.chunk_inherited``)."""
        return {part: inherited for _, part, _, inherited in self.reservations(campaign_id)
                if inherited is not None}

    def epochs(self) -> list[tuple[int, str, int, str, str | None, int]]:
        def work(cur: psycopg.Cursor[Any]) -> list[tuple[int, str, int, str, str | None, int]]:
            cur.execute("SELECT epoch, region, began_ms, kind, deposed, horizon_ms FROM "
                        "region_epochs ORDER BY epoch")
            return [tuple(r) for r in cur.fetchall()]  # type: ignore[misc]
        rows: list[tuple[int, str, int, str, str | None, int]] = self._run(work)
        return rows


def _now(cur: psycopg.Cursor[Any]) -> int:
    cur.execute(f"SELECT {NOW_MS}")
    got = cur.fetchone()
    assert got is not None
    return int(got[0])


def _row(cur: psycopg.Cursor[Any], lock: str) -> Authority | None:
    cur.execute(f"SELECT {COLUMNS} FROM region_authority WHERE id = 1{lock}")
    got = cur.fetchone()
    if got is None:
        return None
    epoch, active, until, draining, horizon, changed = got
    return Authority(int(epoch), str(active), int(until), bool(draining), int(horizon),
                     int(changed))


def _write(cur: psycopg.Cursor[Any], row: Authority, insert: bool = False) -> None:
    values = (row.epoch, row.active, row.lease_until_ms, row.draining, row.horizon_ms,
              row.changed_ms)
    if insert:
        cur.execute(f"INSERT INTO region_authority (id, {COLUMNS}) VALUES (1, %s, %s, %s, %s, "
                    "%s, %s)", values)
    else:
        cur.execute("UPDATE region_authority SET epoch = %s, active = %s, lease_until_ms = %s, "
                    "draining = %s, horizon_ms = %s, changed_ms = %s WHERE id = 1", values)


# -- a worker's hold on the lease ----------------------------------------------------------------
class LeaseLost(Exception):
    """A send was about to start without a current lease: nothing left."""


class Lease(Protocol):
    """What the send paths ask (``RegionLease``, or ``NoRegion`` in a one-region deployment)."""

    name: str | None

    def holds(self) -> int | None: ...
    async def held(self) -> int: ...
    def check(self) -> int: ...
    def horizon_ms(self) -> int: ...


class NoRegion:
    """One region: every send may start, under epoch 0 (which no send carries)."""

    name: str | None = None

    def holds(self) -> int | None:
        return 0

    async def held(self) -> int:
        return 0

    def check(self) -> int:
        return 0

    def horizon_ms(self) -> int:
        return 0


HELD_POLL_S = 0.1  # how often a send waiting for the lease looks again


class RegionLease:
    """A worker's hold on its region's lease. A thread renews it every ``renew_s``; a refusal
    that names a newer epoch than one this process held deposes it for good (its walkers and
    runs never send again: the process must be restarted, and then asks as a new one)."""

    def __init__(self, store: Store, name: str, *, lease_s: float = region.LEASE_S,
                 margin_s: float = region.MARGIN_S, renew_s: float = region.RENEW_S,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.store, self.name, self.renew_s = store, name, renew_s
        self.clock = LeaseClock(lease_s, margin_s)
        self.monotonic = monotonic
        self.deposed = False
        self.last_problem: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="region-lease", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.renew_once()
            self._stop.wait(self.renew_s)

    def renew_once(self) -> None:
        held = self.clock.epoch
        asked_at = self.monotonic()
        try:
            row = self.store.renew(self.name, held, int(self.clock.lease_s * 1000))
        except Refused as refused:
            self.clock.lost()
            newer = refused.row is not None and held is not None and refused.row.epoch > held
            if newer and not self.deposed:
                self.deposed = True
                log.error("region %s: epoch %d deposed (%s); this worker sends nothing more and "
                          "must be restarted", self.name, held, refused.reason)
            self._problem(refused.reason)
            return
        except Exception as exc:  # noqa: BLE001 - the authority unreachable: the lease runs out
            self._problem(f"authority unreachable: {exc}".splitlines()[0])
            return
        if self.deposed:
            return
        self.clock.granted(asked_at, row)
        if self.last_problem is not None:
            log.info("region %s: lease of epoch %d renewed again", self.name, row.epoch)
            self.last_problem = None

    def _problem(self, what: str) -> None:
        if what != self.last_problem:
            log.warning("region %s: lease not renewed: %s", self.name, what)
            self.last_problem = what

    def holds(self) -> int | None:
        return None if self.deposed else self.clock.holds(self.monotonic())

    async def held(self) -> int:
        """The epoch, once the lease holds (waits while it does not: a deposed worker waits
        for ever, so what it holds is never recorded and its region's successor decides it)."""
        while (epoch := self.holds()) is None:
            await asyncio.sleep(HELD_POLL_S)
        return epoch

    def check(self) -> int:
        """The epoch, right before a request leaves; ``LeaseLost`` if the lease ended."""
        epoch = self.holds()
        if epoch is None:
            raise LeaseLost(f"region {self.name}: no current lease; not sent")
        return epoch

    def horizon_ms(self) -> int:
        return self.clock.horizon_ms
