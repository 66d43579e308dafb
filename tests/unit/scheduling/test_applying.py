"""``streams.scheduling.applying``: the jobs topic applied a batch at a time, its commit protocol
(table and index at once, the commit only once the changelog holds the batch) on stand-ins for
the table, the producer and the reader."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from bench.spike import job as spike_job
from streams.runtime.codec import codec
from streams.runtime.partition_reader import Assigned
from streams.scheduling.applying import JobApplier, decide
from streams.scheduling.imports import IMPORTED, ImportWindow
from streams.topology import TopicSpec

CHANGELOG = TopicSpec(name="cronstream-jobs-changelog", key="job_id", schema="Job", compacted=True,
                      doc="the jobs table's changelog")


class Msg:
    def __init__(self, partition: int, offset: int, key: str, value: bytes | None,
                 copy: bool = False) -> None:
        self._p, self._o, self._k, self._v = partition, offset, key.encode(), value
        self._h = [(IMPORTED, b"1")] if copy else None

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def key(self) -> bytes:
        return self._k

    def value(self) -> bytes | None:
        return self._v

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._h


class Table:
    def __init__(self) -> None:
        self.rows: dict[tuple[int, bytes], bytes] = {}
        self.acked: list[tuple[int, range | None]] = []

    def get_in(self, partition: int, key: bytes) -> bytes | None:
        return self.rows.get((partition, key))

    def write(self, partition: int, rows: list[tuple[bytes, bytes | None]]) -> None:
        for key, value in rows:
            if value is None:
                self.rows.pop((partition, key), None)
            else:
                self.rows[(partition, key)] = value

    def write_acked(self, partition: int, rows: list[tuple[bytes, bytes]],
                    offsets: range | None) -> None:
        assert not rows, "the rows were written before the acknowledgement"
        self.acked.append((partition, offsets))


class Producer:
    """Each batch waits until the test acknowledges (or refuses) it."""

    def __init__(self) -> None:
        self.batches: list[tuple[dict[int, list[tuple[str, bytes | None]]], asyncio.Future[Any]]] = []
        self.ends: dict[int, int] = {}

    def acked_offsets(self, topic: TopicSpec, by_partition: dict[int, list[tuple[str, bytes | None]]]
                      ) -> asyncio.Future[Any]:
        assert topic == CHANGELOG
        future = asyncio.get_running_loop().create_future()
        self.batches.append((by_partition, future))
        return future

    def ack(self, index: int) -> None:
        by_partition, future = self.batches[index]
        landed = []
        for part, rows in by_partition.items():
            first = self.ends.get(part, 0)
            self.ends[part] = first + len(rows)
            landed.append((part, first, first + len(rows) - 1, len(rows)))
        future.set_result(landed)

    def refuse(self, index: int) -> None:
        self.batches[index][1].set_exception(RuntimeError("broker gone"))


class Reader:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def assign(self, partitions: set[int]) -> None:
        self.calls.append(("assign", sorted(partitions)))

    def revoke(self, partitions: set[int]) -> None:
        self.calls.append(("revoke", sorted(partitions)))

    def commit(self, offsets: dict[int, int], on_failed: Callable[[int, int], None]) -> None:
        if offsets:
            self.calls.append(("commit", dict(offsets)))


class Index:
    def __init__(self) -> None:
        self.live: dict[tuple[int, str], int] = {}  # (partition, job id) -> revision

    def track(self, partition: int, job: dict[str, Any], live: bool = False) -> None:
        assert live, "a record read now is owed its slots from now"
        self.live[(partition, job["job_id"])] = job["revision"]

    def untrack(self, partition: int, job_id: str) -> None:
        self.live.pop((partition, job_id), None)


def job(job_id: str, revision: int = 1) -> bytes:
    record = codec().decode(spike_job(job_id, "0 0 1 1 *", 0))
    return codec().encode("Job", {**record, "revision": revision})


def run(body: Callable[[JobApplier, Table, Producer, Reader, Index], Coroutine[Any, Any, None]],
        window: ImportWindow | None = None) -> None:
    async def main() -> None:
        table, producer, reader, index = Table(), Producer(), Reader(), Index()
        applier = JobApplier(table, producer, CHANGELOG, reader, index, window or ImportWindow())
        applier.assign({0, 1})
        applier.deliver(Assigned({0: 10, 1: None}))
        await body(applier, table, producer, reader, index)
    asyncio.run(main())


async def turn() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def test_an_imports_copy_older_than_the_table_or_the_batch_itself_is_not_applied():
    held = {(0, b"a"): job("a", revision=3)}
    batch = [Msg(0, 10, "a", job("a", revision=2), copy=True),  # older than the table's
             Msg(0, 11, "b", job("b", revision=5)),  # an API change
             Msg(0, 12, "b", job("b", revision=4), copy=True),  # older than the batch's own
             Msg(1, 7, "c", None, copy=True),  # a delete of a job that is not there
             Msg(1, 8, "d", job("d"), copy=True)]
    by_partition, copies = decide(batch, lambda part, key: held.get((part, key)))
    assert copies == 4, "every copy gives its room in the window back, applied or not"
    assert [key for key, _ in by_partition[0].rows] == ["b"]
    assert [key for key, _ in by_partition[1].rows] == ["d"]
    assert (by_partition[0].next_offset, by_partition[1].next_offset) == (13, 9)


def test_a_batch_is_in_the_table_and_the_index_at_once_and_committed_once_the_changelog_has_it():
    async def body(applier: JobApplier, table: Table, producer: Producer, reader: Reader,
                   index: Index) -> None:
        applier.deliver([Msg(0, 10, "a", job("a")), Msg(1, 0, "b", job("b")),
                         Msg(0, 11, "c", job("c")), Msg(0, 12, "a", None)])
        assert set(table.rows) == {(1, b"b"), (0, b"c")}, "written before the acknowledgement"
        assert set(index.live) == {(1, "b"), (0, "c")}, "deleted jobs leave the index"
        assert producer.batches[0][0] == {0: [("a", job("a")), ("c", job("c")), ("a", None)],
                                          1: [("b", job("b"))]}, "the changelog gets them in order"
        assert ("commit", {0: 13, 1: 1}) not in reader.calls, "nothing committed before the ack"
        producer.ack(0)
        await turn()
        assert reader.calls[-1] == ("commit", {0: 13, 1: 1})
        assert sorted(table.acked) == [(0, range(0, 3)), (1, range(0, 1))]
        assert applier.applied == 4
    run(body)


def test_batches_acknowledged_out_of_order_never_move_a_commit_back():
    async def body(applier: JobApplier, table: Table, producer: Producer, reader: Reader,
                   index: Index) -> None:
        applier.deliver([Msg(0, 10, "a", job("a")), Msg(1, 0, "b", job("b"))])
        applier.deliver([Msg(0, 11, "c", job("c"))])
        producer.ack(1)
        await turn()
        producer.ack(0)
        await turn()
        commits = [arg for kind, arg in reader.calls if kind == "commit"]
        assert commits == [{0: 12}, {1: 1}], "partition 0 stays at 12, not back to 11"
    run(body)


def test_a_refused_changelog_batch_reads_its_partitions_again_from_the_commit_in_order():
    async def body(applier: JobApplier, table: Table, producer: Producer, reader: Reader,
                   index: Index) -> None:
        applier.deliver([Msg(0, 10, "a", job("a", revision=1))])
        applier.deliver([Msg(0, 11, "a", job("a", revision=2))])  # read before the refusal
        producer.refuse(0)
        await turn()
        assert reader.calls[-2:] == [("revoke", [0]), ("assign", [0])]
        producer.ack(1)
        await turn()
        assert not [arg for kind, arg in reader.calls if kind == "commit"], \
            "nothing is committed past a refused batch"
        applier.deliver([Msg(0, 12, "a", job("a", revision=3))])  # read under the old assignment
        assert len(producer.batches) == 2, "dropped until the new start is announced"
        applier.deliver(Assigned({0: 10}))
        applier.deliver([Msg(0, 10, "a", job("a", revision=1)), Msg(0, 11, "a", job("a", revision=2)),
                         Msg(0, 12, "a", job("a", revision=3))])
        assert producer.batches[2][0] == {0: [("a", job("a", revision=1)), ("a", job("a", revision=2)),
                                              ("a", job("a", revision=3))]}
        producer.ack(2)
        await turn()
        assert reader.calls[-1] == ("commit", {0: 13})
        assert index.live[(0, "a")] == 3 and table.rows[(0, b"a")] == job("a", revision=3)
    run(body)


def test_a_revoked_partition_is_neither_applied_nor_committed_here():
    async def body(applier: JobApplier, table: Table, producer: Producer, reader: Reader,
                   index: Index) -> None:
        applier.deliver([Msg(1, 0, "b", job("b"))])
        applier.revoke({1})
        assert reader.calls[-1] == ("revoke", [1])
        producer.ack(0)
        await turn()
        assert not [arg for kind, arg in reader.calls if kind == "commit"], \
            "its next owner reads from the commit"
        applier.deliver([Msg(1, 1, "c", job("c"))])
        assert (1, b"c") not in table.rows and (1, "c") not in index.live
    run(body)


def test_imports_give_their_room_in_the_window_back_as_they_are_applied():
    window = ImportWindow(size=10)
    window.copied(3)

    async def body(applier: JobApplier, table: Table, producer: Producer, reader: Reader,
                   index: Index) -> None:
        applier.deliver([Msg(0, 10, "a", job("a"), copy=True), Msg(0, 11, "b", job("b"), copy=True),
                         Msg(0, 12, "c", job("c"))])
        assert window.unapplied == 1
    run(body, window)
