"""The fan-out benchmark waits for the SES log without parsing it while the campaign runs."""

from __future__ import annotations

from bench import fanout
from tests.fake_clock import FakeClock


def test_waiting_returns_once_every_line_arrived_and_not_before(tmp_path):
    log = tmp_path / "sent.jsonl"
    log.write_bytes(b'{"old": 1}\n')
    start = log.stat().st_size
    # what the SES server appends while the benchmark polls, a piece per poll: the third line
    # is still being written after the first piece
    pieces = [b'{"a": 1}\n{"b": 2}\n{"c"', b"", b': 3}\n']
    clock = FakeClock()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if pieces:
            with open(log, "ab") as f:
                f.write(pieces.pop(0))

    assert fanout.wait_for_mail(log, start, 3, clock=clock, sleep=sleep) == 3
    assert pieces == [], "it returned before the last line was whole"


def test_waiting_gives_up_after_a_quiet_spell_once_mail_arrived(tmp_path):
    log = tmp_path / "sent.jsonl"
    log.write_bytes(b'{"a": 1}\n')
    clock = FakeClock()
    began = clock()
    # 1 of 5 arrived, then nothing: the rest had other outcomes
    assert fanout.wait_for_mail(log, 0, 5, clock=clock, sleep=clock.sleep) == 1
    waited = clock() - began
    assert fanout.QUIET_S < waited <= fanout.QUIET_S + max(clock.slept), \
        "it gave up once the log had been quiet for QUIET_S, not before and not at its deadline"
