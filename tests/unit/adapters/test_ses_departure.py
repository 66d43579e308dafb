"""A request built ahead and held for its go (``streams.adapters.ses.Departure``), without SES:
each one is captured at ``before-send``, after the departure's decision, and never sent."""

from __future__ import annotations

import threading
import time

import pytest

from streams.adapters import ses


class Left(Exception):
    """The request got past its departure: what would have gone on the wire."""


def _left(**_) -> None:
    raise Left


def client(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "unit")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "unit")
    made = ses.client("http://127.0.0.1:1", "us-east-1")
    # registered after the departure's own handler: runs only if the request was let go
    made.meta.events.register("before-send.sesv2.SendBulkEmail", _left)
    return made


def send(made, departure: ses.Departure) -> None:
    ses.send_bulk(made, sender="a@example.com", subject="s", text="t", html=None,
                  entries=[ses.BulkEntry("b@example.net", {}, "{}")], configuration_set=None,
                  departure=departure)


def test_a_request_leaves_only_on_its_go_and_never_once_withheld(monkeypatch):
    made = client(monkeypatch)
    departure = ses.Departure()
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            send(made, departure)
        except BaseException as exc:  # noqa: BLE001 - what the thread ended with
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.2)
    assert outcome == [], "the request left before its go"
    departure.go(time.perf_counter())
    thread.join(10)
    assert isinstance(outcome[0], Left) and departure.open_s is not None

    withheld = ses.Departure()
    withheld.withhold()
    with pytest.raises(ses.Withheld):
        send(made, withheld)


def test_a_request_held_past_its_signatures_life_or_a_failed_last_check_is_withheld(monkeypatch):
    made = client(monkeypatch)
    late = ses.Departure()
    late.go(time.perf_counter())
    monkeypatch.setattr(ses, "MAX_HOLD_S", -1.0)
    with pytest.raises(ses.Withheld):
        send(made, late)
    monkeypatch.setattr(ses, "MAX_HOLD_S", 60.0)
    lost = ses.Departure(last_check=lambda: False)  # the region's lease ended meanwhile
    lost.go(time.perf_counter())
    with pytest.raises(ses.Withheld):
        send(made, lost)
