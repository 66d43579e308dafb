"""The bulk import copier's logic: the window of unapplied copies, which copies are stale, and
a round of copying (a fake consumer and producer: no broker)."""

from __future__ import annotations

import threading
from typing import Any

from api.models import JobIn, job_record
from streams.runtime.codec import codec
from streams.scheduling.imports import IMPORTED, Copier, ImportWindow, imported, stale

JOB = JobIn.model_validate({"schedule": {"cron": "0 0 1 1 *"},
                            "target": {"type": "webhook", "url": "http://127.0.0.1:9/hook"}})


def encoded(revision: int, job_id: str = "j1") -> bytes:
    return codec().encode("Job", job_record(JOB, job_id=job_id, tenant="t", revision=revision,
                                            created_ms=0, updated_ms=0, request_hash=""))


def test_the_window_has_room_until_full_and_again_as_copies_are_applied():
    window = ImportWindow(size=3)
    assert window.room(0) == 3
    window.copied(3)
    assert window.room(0) == 0
    window.applied()
    assert window.room(0) == 1


def test_a_full_window_waits_for_the_applying_thread():
    window = ImportWindow(size=1)
    window.copied(1)
    applier = threading.Timer(0.05, window.applied)  # apply_jobs, on the event loop's thread
    applier.start()
    assert window.room(timeout_s=10) == 1  # woken by applied, long before the timeout
    applier.join()


def test_a_rebalance_gives_the_whole_window_back():
    window = ImportWindow(size=2)
    window.copied(5)  # copies of a partition that then went to another worker
    window.reset()
    assert window.room(0) == 2
    window.applied()  # a late applied copy never makes the count negative
    assert window.unapplied == 0


def test_a_copy_older_than_the_current_definition_is_stale():
    assert not stale(None, encoded(1))  # a new job
    assert not stale(encoded(1), encoded(2))  # a newer revision
    assert stale(encoded(2), encoded(1))  # changed through the API after it was imported
    assert stale(encoded(1), encoded(1))  # the same copy delivered again
    assert not stale(encoded(1), None)  # a delete of a job that is there
    assert stale(None, None)  # nothing to delete


def test_only_copies_carry_the_import_header():
    assert imported([("other", b""), (IMPORTED, b"1")])
    assert not imported([]) and not imported(None) and not imported([("other", b"1")])


class Message:
    def __init__(self, partition: int, offset: int, key: str, value: bytes | None) -> None:
        self._p, self._o, self._k, self._v = partition, offset, key, value

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def key(self) -> bytes:
        return self._k.encode()

    def value(self) -> bytes | None:
        return self._v


class Consumer:
    """Hands out its messages in order; remembers assignments, commits and seeks."""

    def __init__(self, messages: list[Message]) -> None:
        self.messages = messages
        self.assigned: list[Any] = []
        self.commits: list[list[tuple[int, int]]] = []
        self.seeks: list[tuple[int, int]] = []
        self.asked: list[int] = []

    def assign(self, tps: list[Any]) -> None:
        self.assigned = tps

    def assignment(self) -> list[Any]:
        return self.assigned

    def consume(self, count: int, timeout: float) -> list[Message]:
        self.asked.append(count)
        taken, self.messages = self.messages[:count], self.messages[count:]
        return taken

    def commit(self, offsets: list[Any], asynchronous: bool) -> None:
        self.commits.append(sorted((tp.partition, tp.offset) for tp in offsets))

    def seek(self, tp: Any) -> None:
        self.seeks.append((tp.partition, tp.offset))


def test_a_round_copies_what_the_window_has_room_for_per_partition_then_commits():
    consumer = Consumer([Message(0, 5, "a", encoded(1, "a")), Message(3, 9, "b", None),
                         Message(0, 6, "c", encoded(1, "c"))])
    produced: list[tuple[int, list[str]]] = []
    window = ImportWindow(size=2)
    copier = Copier(consumer, lambda part, records: produced.append(
        (part, [key for key, _ in records])), window)
    copier.assign({0, 3})
    assert copier.step(wait_s=0) == 2  # the window's room: two records
    assert sorted(tp.partition for tp in consumer.assigned) == [0, 3]
    assert sorted(produced) == [(0, ["a"]), (3, ["b"])]
    assert consumer.commits == [[(0, 6), (3, 10)]] and window.unapplied == 2
    assert copier.step(wait_s=0) == 0  # full: nothing read
    window.applied()
    assert copier.step(wait_s=0) == 1 and consumer.commits[-1] == [(0, 7)]
    assert consumer.asked == [2, 1]


def test_a_failed_produce_commits_nothing_and_reads_the_batch_again():
    consumer = Consumer([Message(1, 40, "a", encoded(1, "a")), Message(1, 41, "b", None)])

    def refuse(part: int, records: list[Any]) -> None:
        raise RuntimeError("broker away")

    window = ImportWindow(size=10)
    copier = Copier(consumer, refuse, window)
    copier.assign({1})
    assert copier.step(wait_s=0) == 0
    assert consumer.commits == [] and consumer.seeks == [(1, 40)] and window.unapplied == 0


def test_with_no_partitions_nothing_is_read():
    consumer = Consumer([Message(0, 1, "a", encoded(1, "a"))])
    copier = Copier(consumer, lambda part, records: None, ImportWindow(size=10))
    copier.assign(set())
    assert copier.step(wait_s=0) == 0 and consumer.asked == []
