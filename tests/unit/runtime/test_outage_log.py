"""``streams.runtime.outage_log``: one warning per period for every asker, one line at the end."""

from __future__ import annotations

import logging

import pytest

from streams.runtime.outage_log import OutageLog


def test_an_outage_warns_once_per_period_for_all_and_says_when_it_ends(
        caplog: pytest.LogCaptureFixture) -> None:
    outage = OutageLog(logging.getLogger("test.outage"), "ends unknown", warn_every_s=30)
    with caplog.at_level(logging.INFO, logger="test.outage"):
        for now in (100.0, 100.0, 100.1, 129.0):  # many askers failing within one period
            outage.failed(now, "timed out")
        outage.failed(130.5, "timed out")  # a period later: its length so far
        outage.answered(131.0, "the lease")
        outage.answered(132.0)  # no outage: nothing to say
    assert [r.getMessage() for r in caplog.records] == [
        "ends unknown for 0.0s: timed out",
        "ends unknown for 30.5s: timed out",
        "ends unknown no more, after 31.0s (answered by the lease)",
    ]
