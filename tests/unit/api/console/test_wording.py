"""``api.console.wording``: a schedule in words, on a table of expressions."""

import pytest

from api.console.wording import describe
from streams.scheduling.cron import CronSyntaxError


@pytest.mark.parametrize("expr, words", [
    # the time of day
    ("*/5 * * * *", "every 5 minutes"),
    ("0-59/5 * * * *", "every 5 minutes"),  # the same schedule reads the same
    ("* * * * *", "every minute"),
    ("*/10 * * * * *", "every 10 seconds"),
    ("30 * * * * *", "at 30 seconds past the minute"),
    ("0 * * * *", "every hour"),
    ("15 * * * *", "at 15 minutes past the hour"),
    ("0 */2 * * *", "every 2 hours"),
    ("30 2 * * *", "at 02:30"),
    ("15 30 2 * * *", "at 02:30:15"),
    ("0 9,17 * * *", "at 09:00 and 17:00"),
    ("0 0-6/2 * * *", "at 00:00, 02:00, 04:00 and 06:00"),
    ("*/5 9 * * *", "every 5 minutes, from 09:00 through 09:59"),
    ("15,45 8-18 * * 1-5", "at minutes 15 and 45, from 08:00 through 18:59 on weekdays"),
    ("*/30 9-17 * * MON-FRI", "every 30 minutes, from 09:00 through 17:59 on weekdays"),
    # days of the week
    ("0 9 * * MON-FRI", "at 09:00 on weekdays"),
    ("0 9 * * SAT,SUN", "at 09:00 on weekends"),
    ("5 4 * * 0", "at 04:05 on Sundays"),
    ("0 9 * * 1,3,5", "at 09:00 on Mondays, Wednesdays and Fridays"),
    ("0 9 * * TUE-THU", "at 09:00 on Tuesday through Thursday"),
    # days of the month and months
    ("0 0 1 * *", "at 00:00 on the 1st of the month"),
    ("0 0 1,15 * *", "at 00:00 on the 1st and 15th of the month"),
    ("0 0 1 1 *", "at 00:00 on the 1st of January"),
    ("0 0 29 2 *", "at 00:00 on the 29th of February"),
    ("0 0 * 6-8 *", "at 00:00 in June through August"),
    ("0 0 * 1,7 *", "at 00:00 in January and July"),
    ("0 0 1 */3 *", "at 00:00 on the 1st of every 3rd month from January"),
    ("0 0 13 * FRI", "at 00:00 on the 13th of the month or on Fridays"),  # either day field
    # by-month rules
    ("0 12 L * *", "at 12:00 on the last day of the month"),
    ("0 0 L 2 *", "at 00:00 on the last day of February"),
    ("0 0 L-2 * *", "at 00:00 on the 3rd-to-last day of the month"),
    ("0 0 LW * *", "at 00:00 on the last weekday of the month"),
    ("0 0 15W * *", "at 00:00 on the weekday nearest the 15th of the month"),
    ("0 9 * * 2#2", "at 09:00 on the second Tuesday of every month"),
    ("0 9 * JAN 2#2", "at 09:00 on the second Tuesday of January"),
    ("0 0 * * 5L", "at 00:00 on the last Friday of every month"),
    ("0 0 * * L5", "at 00:00 on the last Friday of every month"),
    ("0 9 * * 1#1,5L", "at 09:00 on the first Monday and the last Friday of every month"),
    ("0 0 * 2 1#5", "at 00:00 on the fifth Monday of February"),
    ("0 0 L * 5#5",
     "at 00:00 on the last day of the month or on the fifth Friday of every month"),
    # H without a job id: what the job fixes
    ("H/15 * * * *", "every 15 minutes, from a minute fixed per job"),
    ("H 9 * * *", "at a minute fixed per job, at hour 9"),
    ("0 H(9-17) * * *", "at minute 0, at an hour fixed per job (9 to 17)"),
])
def test_describe(expr, words):
    assert describe(expr) == words


def test_a_job_id_fixes_the_hashed_values():
    """With the job id the words are that job's times, as ``cron.parse`` computes them."""
    assert describe("H H * * *", "job-1") == "at 02:44"
    assert describe("H H * * *", "job-2") != describe("H H * * *", "job-1")


def test_an_expression_the_engine_refuses_is_refused():
    with pytest.raises(CronSyntaxError, match="the week in d#n must be 1-5"):
        describe("0 9 * * 2#6")
