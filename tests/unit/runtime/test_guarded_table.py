"""Table recovery a zombie cannot fool: the persisted offset only advances over this process's own
unbroken writes, and a state-machine table never moves a key backwards during recovery."""

from __future__ import annotations

from streams.runtime.guarded_table import contiguous_advance, regresses
from tests.waiting import loop_turns

RANK = {b"intent": 1, b"done": 2}


def test_own_writes_in_a_row_advance_the_persisted_offset() -> None:
    pending: set[int] = set()
    assert contiguous_advance(99, 100, pending) == 100
    assert contiguous_advance(100, 101, pending) == 101
    assert pending == set()


def test_a_fresh_partition_starts_before_offset_zero() -> None:
    assert contiguous_advance(None, 0, set()) == 0


def test_out_of_order_acks_join_the_run_once_the_gap_closes() -> None:
    pending: set[int] = set()
    assert contiguous_advance(10, 12, pending) is None
    assert contiguous_advance(10, 11, pending) == 12
    assert pending == set()


def test_the_zombie_case_a_foreign_record_stops_the_run() -> None:
    """The paused worker's last own write was offset 2339; the new owner wrote 2340..2388; the
    zombie then wrote 2389 and 2390. faust would persist 2390 and recovery would skip the owner's
    records; the guarded table stays at 2339 so recovery reads them."""
    pending: set[int] = set()
    assert contiguous_advance(2339, 2389, pending) is None
    assert contiguous_advance(2339, 2390, pending) is None
    assert pending == {2389, 2390}


def test_acks_at_or_below_the_persisted_offset_change_nothing() -> None:
    pending: set[int] = set()
    assert contiguous_advance(50, 50, pending) is None
    assert contiguous_advance(50, 7, pending) is None
    assert pending == set()


def test_a_late_intent_never_undoes_a_done_chunk() -> None:
    assert regresses(RANK, b"done", b"intent")
    assert not regresses(RANK, b"intent", b"done")
    assert not regresses(RANK, None, b"intent")
    assert not regresses(RANK, b"done", None)  # a tombstone is not a state of the machine
    assert not regresses(RANK, b"done", b"done")


class _Store:
    def __init__(self) -> None:
        self.persisted: dict[object, int] = {}
        self.stored: dict[bytes, bytes] = {}  # the local RocksDB's writes

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.stored[key] = value

    def persisted_offset(self, tp: object) -> int | None:
        return self.persisted.get(tp)

    def set_persisted_offset(self, tp: object, offset: int) -> None:
        self.persisted[tp] = offset


class _Written:
    """What faust hands ``_on_changelog_sent``: the message sent and the broker's answer."""

    def __init__(self, key: bytes, offset: int = 0, error: Exception | None = None) -> None:
        self.message = type("Pending", (), {"key": key})()
        self._offset, self._error = offset, error

    def result(self) -> object:
        if self._error is not None:
            raise self._error
        return type("Meta", (), {"topic_partition": ("send-chunks", 3), "offset": self._offset})()


def _table() -> object:
    """A GuardedTable without a faust app: writes are recorded, acknowledgements made by hand."""
    from streams.runtime.guarded_table import GuardedTable

    class Recorded(GuardedTable):
        def on_key_set(self, key: bytes, value: bytes) -> None:  # the changelog record sent
            self.written.append((key, value))

    table = object.__new__(Recorded)
    table.written, table._data = [], _Store()
    table._own_acked, table._awaiting_ack = {}, {}
    return table


def test_a_durable_write_returns_only_once_its_own_record_is_acknowledged() -> None:
    import asyncio

    async def scenario() -> list[str]:
        table = _table()
        table.data.persisted[("send-chunks", 3)] = 39
        steps: list[str] = []

        async def intent() -> None:
            await table.put_acked(b"c:u:7", b"intent")
            steps.append("acknowledged")

        task = asyncio.create_task(intent())
        await loop_turns()
        assert table.written == [(b"c:u:7", b"intent")]
        # not in the local store until the broker holds it: a worker killed now and restarted
        # on its own RocksDB must not find an intent the changelog never had
        assert table.data.stored == {}
        table._on_changelog_sent(_Written(b"c:u:8", 40))  # another chunk's record
        await loop_turns()
        steps.append("other acked")
        assert table.data.stored == {}
        table._on_changelog_sent(_Written(b"c:u:7", 41))
        await task
        assert table.data.persisted == {("send-chunks", 3): 41}
        assert table.data.stored == {b"c:u:7": b"intent"}
        return steps

    assert asyncio.run(scenario()) == ["other acked", "acknowledged"]


def test_a_durable_write_the_broker_refused_or_never_answered_raises() -> None:
    import asyncio

    import pytest

    async def refused() -> None:
        table = _table()
        task = asyncio.create_task(table.put_acked(b"k", b"intent"))
        await loop_turns()
        with pytest.raises(RuntimeError):
            table._on_changelog_sent(_Written(b"k", error=RuntimeError("not leader")))
        with pytest.raises(RuntimeError, match="not leader"):
            await task

    async def silent() -> None:
        table = _table()
        with pytest.raises(TimeoutError):
            await table.put_acked(b"k", b"intent", timeout_s=0.05)
        assert table._awaiting_ack == {}
        assert table.data.stored == {b"k": b"intent"}, "maybe made: kept locally as made"

    asyncio.run(refused())
    asyncio.run(silent())


def _rocks_table(tmp_path) -> object:
    """A GuardedTable over one real RocksDB partition (rocksdict, as faust opens it)."""
    from rocksdict import Options, Rdict

    from streams.runtime.guarded_table import GuardedTable

    db = Rdict(str(tmp_path / "p3"), options=Options(raw_mode=True))

    class Store:
        offset_key = b"__faust\0offset__"

        def persisted_offset(self, tp: object) -> int | None:
            raw = db.get(self.offset_key)
            return None if raw is None else int(raw)

        def _db_for_partition(self, partition: int) -> object:
            assert partition == 3
            return db

    table = object.__new__(GuardedTable)
    table._data, table._own_acked = Store(), {}
    table.changelog_topic = type("Topic", (), {"get_topic_name": lambda self: "done-changelog"})()
    return table, db


def test_a_batch_of_own_marks_is_written_at_once_with_the_persisted_offset(tmp_path) -> None:
    table, db = _rocks_table(tmp_path)
    db[table.data.offset_key] = b"99"
    table.write_acked(3, [(b"f1", b"succeeded"), (b"f2", b"failed")], range(100, 102))
    assert (db[b"f1"], db[b"f2"]) == (b"succeeded", b"failed")
    assert table.data.persisted_offset(None) == 101


def test_a_batch_with_a_foreign_record_between_its_marks_leaves_the_offset(tmp_path) -> None:
    """Another writer's record came between two of ours (a zombie's): recovery must read it,
    so the persisted offset stays; the marks themselves are written."""
    table, db = _rocks_table(tmp_path)
    db[table.data.offset_key] = b"99"
    table.write_acked(3, [(b"f1", b"succeeded"), (b"f2", b"succeeded")], None)
    assert db[b"f2"] == b"succeeded"
    assert table.data.persisted_offset(None) == 99
    table.write_acked(3, [(b"f3", b"succeeded")], range(105, 106))
    assert table.data.persisted_offset(None) == 99, "a gap of others' offsets never closes"
