"""The bulk importer's pure parts: the window of unapplied copies, which imports are stale, and
a batch's copy (a fake jobs table and producer: no broker)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from api.models import JobIn, job_record
from streams.runtime.codec import codec
from streams.scheduling.imports import IMPORTED, Importer, ImportWindow, imported, stale

JOB = JobIn.model_validate({"schedule": {"cron": "0 0 1 1 *"},
                            "target": {"type": "webhook", "url": "http://127.0.0.1:9/hook"}})


def encoded(revision: int, job_id: str = "j1") -> bytes:
    return codec().encode("Job", job_record(JOB, job_id=job_id, tenant="t", revision=revision,
                                            created_ms=0, updated_ms=0, request_hash=""))


def test_the_window_closes_when_full_and_opens_as_copies_are_applied():
    window = ImportWindow(size=3)
    window.copied(2)
    assert window.room.is_set()
    window.copied(1)
    assert not window.room.is_set() and window.unapplied == 3
    window.applied()
    assert window.room.is_set() and window.unapplied == 2


def test_a_rebalance_gives_the_whole_window_back():
    window = ImportWindow(size=2)
    window.copied(5)  # copies of a partition that then went to another worker
    window.reset()
    assert window.room.is_set() and window.unapplied == 0
    window.applied()  # a late applied copy never makes the count negative
    assert window.unapplied == 0


def test_an_import_older_than_the_current_definition_is_stale():
    assert not stale(None, encoded(1))  # a new job
    assert not stale(encoded(1), encoded(2))  # a newer revision
    assert stale(encoded(2), encoded(1))  # changed through the API after it was imported
    assert stale(encoded(1), encoded(1))  # the same copy delivered again
    assert not stale(encoded(1), None)  # a delete of a job that is there
    assert stale(None, None)  # nothing to delete


def test_only_copies_carry_the_import_header():
    assert imported({IMPORTED: b"1"})
    assert not imported({}) and not imported(None)


class Table:
    def __init__(self, rows: dict[tuple[int, bytes], bytes]) -> None:
        self.rows = rows

    def get_in(self, partition: int, key: bytes) -> bytes | None:
        return self.rows.get((partition, key))


class Producer:
    def __init__(self) -> None:
        self.batches: list[tuple[str, list[tuple[str, bytes | None]], int | None, Any]] = []

    async def acked(self, topic: Any, records: list[tuple[str, bytes | None]],
                    partition: int | None = None, headers: Any = None) -> None:
        self.batches.append((topic.name, list(records), partition, headers))


def event(partition: int, offset: int, key: str, value: bytes | None) -> Any:
    return SimpleNamespace(key=key.encode(), value=value,
                           message=SimpleNamespace(partition=partition, offset=offset))


def test_a_batch_is_copied_per_partition_with_its_header_and_stale_imports_dropped():
    table = Table({(0, b"changed"): encoded(2, "changed")})
    producer, window = Producer(), ImportWindow(size=10)
    importer = Importer(table, lambda: producer, window)  # type: ignore[arg-type]
    events = [event(0, 1, "new", encoded(1, "new")), event(1, 7, "other", encoded(1, "other")),
              event(0, 2, "changed", encoded(1, "changed")), event(0, 3, "gone", None)]
    copied = asyncio.run(importer.copy(events))  # type: ignore[arg-type]
    assert copied == 2 and window.unapplied == 2
    assert sorted((p, [k for k, _ in records]) for _, records, p, _ in producer.batches) == \
        [(0, ["new"]), (1, ["other"])]
    assert all(name == "cronstream.jobs" and headers == {IMPORTED: b"1"}
               for name, _, _, headers in producer.batches)


class Stream:
    def __init__(self) -> None:
        self.acked: list[int] = []

    async def ack(self, event: Any) -> None:
        self.acked.append(event.message.offset)


def test_held_records_wait_for_room_in_the_window_and_are_acked_once_copied():
    async def scenario() -> tuple[list[str], list[int]]:
        producer, window, stream = Producer(), ImportWindow(size=1), Stream()
        importer = Importer(Table({}), lambda: producer, window)  # type: ignore[arg-type]
        importer.start_copier()
        importer.hold(stream, event(0, 1, "a", encoded(1, "a")))
        await asyncio.sleep(0.01)
        importer.hold(stream, event(0, 2, "b", encoded(1, "b")))  # the window is full now
        await asyncio.sleep(0.01)
        assert len(producer.batches) == 1 and stream.acked == [1]
        window.applied()  # apply_jobs applied "a"
        await asyncio.sleep(0.01)
        return [records[0][0] for _, records, _, _ in producer.batches], stream.acked

    assert asyncio.run(scenario()) == (["a", "b"], [1, 2])


def test_reading_pauses_while_too_many_records_are_held_and_resumes_once_copied(monkeypatch):
    monkeypatch.setattr("streams.scheduling.imports.HELD", 4)
    calls: list[bool] = []

    async def scenario() -> None:
        producer, window, stream = Producer(), ImportWindow(size=100), Stream()
        importer = Importer(Table({}), lambda: producer, window,  # type: ignore[arg-type]
                            calls.append)
        for offset in range(4):  # held before the copier runs: the fourth pauses reading
            importer.hold(stream, event(0, offset, f"j{offset}", encoded(1, f"j{offset}")))
        assert calls == [True]
        importer.start_copier()
        await asyncio.sleep(0.01)
        assert stream.acked == [0, 1, 2, 3]

    asyncio.run(scenario())
    assert calls == [True, False]


def test_a_revoked_partitions_held_records_are_left_to_its_new_owner():
    producer, window, stream = Producer(), ImportWindow(size=10), Stream()
    importer = Importer(Table({}), lambda: producer, window)  # type: ignore[arg-type]

    async def hold() -> None:  # the arrival event lives in an event loop
        importer.hold(stream, event(0, 1, "a", encoded(1, "a")))
        importer.hold(stream, event(3, 1, "b", encoded(1, "b")))

    asyncio.run(hold())
    window.copied(5)
    importer.revoked({3})
    assert [e.key for _, e in importer.held] == [b"a"] and window.unapplied == 0
