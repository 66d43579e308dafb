"""A batch of produced records is acknowledged once: when the last delivery is in, or at the
first error (the fan-out's ledger records of a chunk share one future)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from streams.runtime.emit import _Countdown


def test_reports_once_when_every_record_is_delivered() -> None:
    reports: list[Exception | None] = []
    countdown = _Countdown(3, reports.append)
    countdown.delivered(None, None)  # type: ignore[arg-type]
    countdown.delivered(None, None)  # type: ignore[arg-type]
    assert reports == []
    countdown.delivered(None, None)  # type: ignore[arg-type]
    assert reports == [None]


def test_the_first_error_is_reported_at_once_and_nothing_after_it() -> None:
    reports: list[Exception | None] = []
    countdown = _Countdown(3, reports.append)
    countdown.delivered(KafkaError(KafkaError._MSG_TIMED_OUT), None)  # type: ignore[arg-type]
    countdown.delivered(None, None)  # type: ignore[arg-type]
    countdown.delivered(KafkaError(KafkaError._MSG_TIMED_OUT), None)  # type: ignore[arg-type]
    assert len(reports) == 1
    assert isinstance(reports[0], KafkaException)


class _Producer:
    """Stands in for librdkafka's: records each produce and whether it asked for a report."""

    def __init__(self) -> None:
        self.produced: list[tuple[str, int, bool]] = []

    def produce(self, topic, value, key, partition, on_delivery=None, **_) -> None:
        self.produced.append((key.decode(), partition, on_delivery is not None))


def _emitter() -> tuple[object, _Producer]:
    from streams.runtime.emit import Emitter

    emitter = Emitter("127.0.0.1:1", "test")
    emitter._made = producer = _Producer()  # never connects
    return emitter, producer


def test_a_group_on_one_partition_asks_for_its_first_and_last_reports_only() -> None:
    """An idempotent producer delivers a partition's records in order and without gaps, so the
    first and last stand for the group; each report is a GIL hand-off on the poll thread."""
    from streams.runtime.emit import _reports
    from streams.topology import LEDGER

    emitter, producer = _emitter()
    records = [(f"k{i}", b"v") for i in range(5)]
    countdown = _Countdown(_reports(records, 3), lambda error: None)
    emitter._produce_reported(LEDGER, records, 3, countdown)
    assert producer.produced == [("k0", 3, True), ("k1", 3, False), ("k2", 3, False),
                                 ("k3", 3, False), ("k4", 3, True)]
    assert _reports(records, 3) == 2
    assert _reports(records, None) == 5, "left to the partitioner: they may land anywhere"
    assert _reports(records[:2], 3) == 2 and _reports(records[:1], 3) == 1


def test_where_a_group_landed_is_its_first_and_last_offset_and_its_size() -> None:
    from streams.runtime.emit import _landed

    groups = {0: [("a", b""), ("b", b""), ("c", b"")], 5: [("d", b"")]}
    reported = [(0, 40, b"a"), (5, 7, b"d"), (0, 44, b"c")]  # a foreign record in between
    assert sorted(_landed(reported, groups)) == [(0, 40, 44, 3), (5, 7, 7, 1)]
