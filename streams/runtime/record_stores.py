"""Where a topic view (``streams.runtime.topic_view``) keeps its records: the state store, apart from the
consuming.

Two stores, because the compacted topics the views follow differ by orders of magnitude:

- ``MemoryStore``: decoded records in a dict, read from the beginning at every start. For the
  small topics (tenants, campaigns), where a dict is the cheapest index there is.
- ``SqliteStore``: the records' bytes in a SQLite file, one field of them indexed, and the next
  offset of every partition committed in the same transaction as the rows it covers (a
  checkpoint, as a Kafka Streams state store keeps next to its changelog). For the jobs topic:
  at 1.1M jobs a decoded dict took the API 74 s and 2.5 GiB to build, every start, and listing
  one tenant's jobs sorted all of them. On disk the API restarts from its checkpoint and reads
  only the topic's tail; a tenant's jobs are a range of an index.

Both are rebuilt from the topic at will, so neither needs backups. A SQLite file is emptied and
read again when its checkpoint cannot be trusted (``SqliteStore.resume``).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from streams.runtime.codec import codec

log = logging.getLogger(__name__)

FORMAT = 5  # the file's layout (``PRAGMA user_version``); bump it with every change to a SCHEMA
IN_CHUNK = 500  # keys per ``IN (...)`` lookup, well under SQLite's limit on bound parameters
Row = tuple[str, Any]  # (key, what the store keeps of the record; None for a tombstone)


@dataclass(frozen=True)
class Checkpoint:
    """What a view knows of its topic when it starts, to judge a stored checkpoint by."""

    source: str  # the topic's id: another id is another topic under the same name
    starts: dict[int, int]  # first offset still in the log, per partition
    ends: dict[int, int]  # next offset to be written, per partition
    tombstones_kept_ms: int  # the topic's delete.retention.ms
    now_ms: int


class ViewStore(Protocol):
    durable: bool  # keeps records and positions across processes (``resume`` is meaningful)

    def resume(self, checkpoint: Checkpoint) -> dict[int, int]:
        """The next offset per partition to read from, given what the topic is now."""

    def mark_current(self, now_ms: int) -> None:
        """The view has read everything the topic held at ``now_ms``."""

    def close(self) -> None: ...

    def prepare(self, key: str, value: bytes | None) -> Row:
        """What the store will keep of one record; raises ``SchemaError`` for unreadable bytes
        (the view logs it with its partition and offset, and skips it)."""

    def write(self, rows: list[Row], positions: dict[int, int]) -> None:
        """Apply a batch in order and, for a durable store, checkpoint ``positions`` with it."""

    def holding(self, records: dict[str, bytes | None]) -> set[str]:
        """The keys of ``records`` the store holds as they are already (a tombstone: holds
        nothing for the key), which the view need not prepare and write again."""

    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, value: dict[str, Any] | None) -> None:
        """A write this process just made, applied before the topic delivers it back."""

    def put_many(self, items: list[tuple[str, bytes | None]]) -> None:
        """Writes this process is making (an import's thousand jobs), as the encoded records it
        produces, applied together."""


class MemoryStore:
    """Decoded records in a dict; ``on_change`` sees every change (the API's key index)."""

    durable = False

    def __init__(self, on_change: Callable[[str, dict[str, Any] | None], None] | None = None
                 ) -> None:
        self._data: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._on_change = on_change

    def prepare(self, key: str, value: bytes | None) -> Row:
        return key, codec().decode(value) if value is not None else None

    def write(self, rows: list[Row], positions: dict[int, int]) -> None:
        for key, value in rows:
            self.put(key, value)

    def holding(self, records: dict[str, bytes | None]) -> set[str]:
        return set()  # decoded records: a record read again is cheap to write again

    def resume(self, checkpoint: Checkpoint) -> dict[int, int]:
        return {}

    def mark_current(self, now_ms: int) -> None:
        pass

    def close(self) -> None:
        pass

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._data.get(key)

    def values(self) -> list[dict[str, Any]]:
        """Every record, as of now (a copy: the view's thread keeps writing)."""
        with self._lock:
            return list(self._data.values())

    def put(self, key: str, value: dict[str, Any] | None) -> None:
        with self._lock:
            if value is None:
                self._data.pop(key, None)
            else:
                self._data[key] = value
        if self._on_change:
            self._on_change(key, value)

    def put_many(self, items: list[tuple[str, bytes | None]]) -> None:
        self.write([self.prepare(key, value) for key, value in items], {})


CACHE_KIB = 128 * 1024  # each store's page cache at most (SQLite takes it as it needs it)
CHECKPOINT_PAGES = 20_000  # WAL pages (4 KiB) between automatic checkpoints


_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    key TEXT PRIMARY KEY, indexed TEXT NOT NULL, value BLOB NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS records_by_indexed ON records (indexed, key);
CREATE TABLE IF NOT EXISTS counts (indexed TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS positions (partition INTEGER PRIMARY KEY, next_offset INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS source (id TEXT NOT NULL, current_ms INTEGER);
"""


class SqliteStore:
    """Records of one Avro type as bytes, keyed, with ``field`` indexed, in a SQLite file.

    One connection behind a lock: the view's thread writes batches of a few thousand rows (a
    few milliseconds each) and request handlers read single rows or one page of an index,
    so nobody waits long, and there is one writer, so no ``database is locked``. Durability is
    WAL with ``synchronous=NORMAL``: a crash may lose the last batches, never the file's
    consistency, and what was lost is read again from the checkpoint, which was lost with it.
    """

    durable = True
    SCHEMA = _SCHEMA  # a store that keeps more (``api.job_store``) adds its tables to these two
    TABLES: tuple[str, ...] = ("records", "counts", "positions", "source")

    def __init__(self, path: Path, record: str, field: str) -> None:
        self.path, self.record, self.field = path, record, field
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = self._open()
        self._reading = threading.Lock()  # the counts' reader (``count_for``), not the writer's
        self._reader: sqlite3.Connection | None = None

    def _open(self) -> sqlite3.Connection:
        try:
            return self._connect()
        except sqlite3.DatabaseError as exc:
            if exc.sqlite_errorname not in ("SQLITE_NOTADB", "SQLITE_CORRUPT"):
                raise  # locked, full, unwritable: the file may be fine, so keep it
            log.warning("view store %s unreadable (%s): rebuilding it from the topic", self.path,
                        exc)
            for stale in (self.path, *self.path.parent.glob(f"{self.path.name}-*")):
                stale.unlink(missing_ok=True)
            return self._connect()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            db.execute("PRAGMA busy_timeout=10000")  # first: another process may hold it now
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            # an import's batch dirties a page of every index per job (random keys): a page
            # cache of 128 MiB and a WAL checkpointed every 80 MB rather than every 4 MB (each
            # page copied to the file once for many commits) took the API's store from 6.9k to
            # 13.9k jobs/s in batches of 5,000 (118 to 66 µs of CPU a job: bench.job_store)
            db.execute(f"PRAGMA cache_size={-CACHE_KIB}")
            db.execute(f"PRAGMA wal_autocheckpoint={CHECKPOINT_PAGES}")
            self._ensure_format(db)
        except BaseException:
            db.close()
            raise
        return db

    def _ensure_format(self, db: sqlite3.Connection) -> None:
        found = db.execute("PRAGMA user_version").fetchone()[0]
        if found != FORMAT:  # another layout (or a new file): it is a cache, so start it over
            if found:
                log.warning("view store %s has format %d, not %d: rebuilding it from the topic",
                            self.path, found, FORMAT)
            db.executescript("".join(f"DROP TABLE IF EXISTS {t};" for t in self.TABLES))
            db.executescript(self.SCHEMA)
            db.execute(f"PRAGMA user_version = {FORMAT}")

    def prepare(self, key: str, value: bytes | None) -> Row:
        if value is None:
            return key, None
        return key, (codec().leading_string(value, self.record, self.field), value)

    def write(self, rows: list[Row], positions: dict[int, int]) -> None:
        latest = dict(rows)  # a key written twice in one batch ends as its last value
        with self._lock, self._transaction():
            self._count(latest)
            self._keep_more(latest)
            self._db.executemany(
                "INSERT OR REPLACE INTO records (key, indexed, value) VALUES (?, ?, ?)",
                [(key, kept[0], kept[1]) for key, kept in latest.items() if kept is not None])
            self._db.executemany("DELETE FROM records WHERE key = ?",
                                 [(key,) for key, kept in latest.items() if kept is None])
            self._db.executemany(
                "INSERT OR REPLACE INTO positions (partition, next_offset) VALUES (?, ?)",
                list(positions.items()))

    def holding(self, records: dict[str, bytes | None]) -> set[str]:
        """Why: the API writes an import's jobs to its store as it accepts them, and the jobs
        topic delivers the same bytes back a moment later (the import lane's copies); preparing
        them again (decoding, the next run's search) was a quarter of the API's CPU while it
        imported."""
        stored = self.raws(list(records))
        return {key for key, value in records.items() if stored.get(key) == value}

    def raws(self, keys: list[str]) -> dict[str, bytes]:
        """The records of ``keys`` as stored (encoded), for those the store has."""
        stored: dict[str, bytes] = {}
        with self._lock:
            for at in range(0, len(keys), IN_CHUNK):
                chunk = keys[at:at + IN_CHUNK]
                stored.update(self._db.execute(
                    f"SELECT key, value FROM records WHERE key IN ({','.join('?' * len(chunk))})",
                    chunk))
        return stored

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """One transaction on the store's connection, rolled back if anything in it fails (the
        caller holds the lock)."""
        self._db.execute("BEGIN")
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def _keep_more(self, latest: dict[str, Any]) -> None:
        """What a store that keeps more than the records writes of a batch, in its transaction
        (``latest``: key -> what ``prepare`` kept, None for a delete)."""

    def _count(self, latest: dict[str, Any]) -> None:
        """Move the per-value counts by what the batch changes. Why keep counts: the API checks
        a tenant's quota on every create, and counting a million index entries took 61 ms of a
        lock the view's writer and every reader share."""
        self._move_counts("counts", ("indexed",), "SELECT key, indexed FROM records",
                          {key: None if kept is None else (kept[0],)
                           for key, kept in latest.items()})

    def _move_counts(self, counts: str, columns: tuple[str, ...], current: str,
                     changes: dict[str, tuple[Any, ...] | None]) -> None:
        """Move the kept counts of the table ``counts`` (a row ``n`` per value of ``columns``)
        by a batch: each key's group after it (None: gone) against its group before, which
        ``current`` (``SELECT key, <columns> FROM ...``) reads; before the batch is written."""
        keys = list(changes)
        before: dict[str, tuple[Any, ...]] = {}
        for at in range(0, len(keys), IN_CHUNK):
            chunk = keys[at:at + IN_CHUNK]
            before.update((key, tuple(group)) for key, *group in self._db.execute(
                f"{current} WHERE key IN ({','.join('?' * len(chunk))})", chunk))
        moves: Counter[tuple[Any, ...]] = Counter()
        for key, group in changes.items():
            if key in before:
                moves[before[key]] -= 1
            if group is not None:
                moves[group] += 1
        named = ", ".join(columns)
        self._db.executemany(
            f"INSERT INTO {counts} ({named}, n) VALUES ({', '.join('?' * (len(columns) + 1))}) "
            f"ON CONFLICT ({named}) DO UPDATE SET n = n + excluded.n",
            [(*group, n) for group, n in moves.items() if n])
        self._db.execute(f"DELETE FROM {counts} WHERE n = 0")

    def resume(self, checkpoint: Checkpoint) -> dict[int, int]:
        """The stored positions, when they can be trusted; else an empty store, to be read from
        the beginning. Not trusted: another topic (its id); a position past a partition's end
        (the broker lost data) or before its start (records deleted unread); and a view not
        known current within half the topic's tombstone retention. Why the last: compaction
        removes a tombstone ``delete.retention.ms`` after it was cleaned, so a store that
        stopped reading for longer might never see the delete of a job it holds, and would
        list that job for ever. Everything written after the view was last current is younger
        than that, so its tombstones are still there; half leaves room for the cleaner's
        timing."""
        with self._lock:
            rows = list(self._db.execute("SELECT id, current_ms FROM source"))
            positions = dict(self._db.execute("SELECT partition, next_offset FROM positions"))
        problems = [f"partition {p}: position {at} outside [{checkpoint.starts.get(p, 0)}, "
                    f"{checkpoint.ends.get(p, 0)}]" for p, at in positions.items()
                    if not checkpoint.starts.get(p, 0) <= at <= checkpoint.ends.get(p, 0)]
        if not rows or rows[0][0] != checkpoint.source:
            problems.append(f"topic id {rows[0][0] if rows else None}, now {checkpoint.source}")
        elif rows[0][1] is None:
            problems.append("never caught up")
        elif checkpoint.now_ms - rows[0][1] > checkpoint.tombstones_kept_ms // 2:
            problems.append(f"last current {(checkpoint.now_ms - rows[0][1]) / 3_600_000:.1f} h "
                            f"ago, tombstones are kept {checkpoint.tombstones_kept_ms / 3_600_000:g} h")
        if not problems:
            return positions
        if rows or positions:
            log.warning("view store %s: rebuilding it from the topic (%s)", self.path,
                        "; ".join(problems))
        with self._lock:
            self._db.executescript(
                "BEGIN;" + "".join(f"DELETE FROM {t};" for t in self.TABLES) + "COMMIT;")
            self._db.execute("INSERT INTO source (id) VALUES (?)", (checkpoint.source,))
        return {}

    def mark_current(self, now_ms: int) -> None:
        with self._lock:
            self._db.execute("UPDATE source SET current_ms = ?", (now_ms,))

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM records WHERE key = ?", (key,)).fetchone()
        return codec().decode(row[0]) if row else None

    def put(self, key: str, value: dict[str, Any] | None) -> None:
        self.put_many([(key, None if value is None else codec().encode(self.record, value))])

    def put_many(self, items: list[tuple[str, bytes | None]]) -> None:
        """One transaction for them all: an import's thousand jobs written one transaction
        each took 58 % of the API's CPU while it imported (bench.churn)."""
        self.write([self.prepare(key, value) for key, value in items], {})

    def keys_for(self, indexed: str, after: str | None, limit: int) -> list[str]:
        """Up to ``limit`` keys whose field is ``indexed``, in key order, after ``after``."""
        with self._lock:
            return [row[0] for row in self._db.execute(
                "SELECT key FROM records WHERE indexed = ? AND key > ? ORDER BY key LIMIT ?",
                (indexed, after or "", limit))]

    def count_for(self, indexed: str) -> int:
        """How many records have ``indexed`` (kept up to date by every write), as of the last
        write committed. Read on a connection of its own, never behind the writer's lock: the
        API checks a tenant's quota with it on the event loop at every create, and behind the
        lock it waited for an import's whole batch, every other request with it (py-spy: a third
        of the loop's time while a million jobs were imported; another tenant's one-job POST
        answered in p99 2.4 s). In WAL mode a reader sees the last commit while a batch is
        being written."""
        with self._reading:
            if self._reader is None:
                self._reader = sqlite3.connect(self.path, check_same_thread=False,
                                               isolation_level=None)
                self._reader.execute("PRAGMA query_only=ON")
            # fetchall: the statement ends, and with it the read transaction (an open one would
            # hold the WAL's checkpoints back)
            rows = self._reader.execute("SELECT n FROM counts WHERE indexed = ?",
                                        (indexed,)).fetchall()
        return int(rows[0][0]) if rows else 0

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM records").fetchone()[0])

    def close(self) -> None:
        with self._reading:
            if self._reader is not None:
                self._reader.close()
        with self._lock:
            self._db.close()

