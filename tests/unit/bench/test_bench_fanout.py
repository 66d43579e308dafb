"""The fan-out benchmark waits for the SES log without parsing it while the campaign runs."""

from __future__ import annotations

import threading
import time

from bench import fanout

REAL_SLEEP = time.sleep


def test_waiting_returns_once_every_line_arrived_and_not_before(tmp_path, monkeypatch):
    log = tmp_path / "sent.jsonl"
    log.write_bytes(b'{"old": 1}\n')
    start = log.stat().st_size
    monkeypatch.setattr(fanout.time, "sleep", lambda _s: REAL_SLEEP(0.01))

    def writer() -> None:
        with open(log, "ab") as f:
            f.write(b'{"a": 1}\n{"b"')  # the second line is still being written
            f.flush()
            REAL_SLEEP(0.1)
            f.write(b': 2}\n{"c": 3}\n')

    thread = threading.Thread(target=writer)
    thread.start()
    began = time.monotonic()
    fanout.wait_for_mail(log, start, 3)
    thread.join()
    assert time.monotonic() - began >= 0.1  # it waited for the last line


def test_waiting_gives_up_after_a_quiet_spell_once_mail_arrived(tmp_path, monkeypatch):
    log = tmp_path / "sent.jsonl"
    log.write_bytes(b'{"a": 1}\n')
    monkeypatch.setattr(fanout, "QUIET_S", 0.05)
    monkeypatch.setattr(fanout.time, "sleep", lambda _s: REAL_SLEEP(0.01))
    began = time.monotonic()
    fanout.wait_for_mail(log, 0, 5)  # 1 of 5 arrived, then nothing: the rest had other outcomes
    assert time.monotonic() - began < 5
