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
