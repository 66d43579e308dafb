"""Pure parts of the operator surface: lag arithmetic, replay planning, progress lines, CLI input."""

from __future__ import annotations

import json

import pytest

from cli import progress
from cli.client import describe, load_documents
from cli.failures import CliError
from ops import lag, replay
from streams.runtime.metrics import STALL_S, WorkerHealth


def test_lag_is_end_minus_committed_and_unknown_without_a_commit():
    assert lag.offset_lag(7, 10) == 3
    assert lag.offset_lag(10, 10) == 0
    assert lag.offset_lag(None, 10) is None
    assert lag.offset_lag(12, 10) == 0  # a commit past a truncated end is not negative lag


def test_time_lag_is_the_age_of_the_oldest_unprocessed_record():
    assert lag.record_age_s(1_000, 0, 99_000) == 0.0  # caught up: no time lag, whatever the stamp
    assert lag.record_age_s(1_000, 5, 11_000) == 10.0
    assert lag.record_age_s(None, 5, 11_000) is None
    assert lag.record_age_s(-1, 5, 11_000) is None  # a record without a timestamp


def test_the_run_backlog_is_the_workers_uncommitted_fired_records_and_the_oldest_age():
    def row(group, topic, part, lag_, age):
        return lag.PartitionLag(group, topic, part, 0, lag_, lag_, age, None, None)
    rows = [row("cronstream", "cronstream.fired", 0, 40, 12.5),
            row("cronstream", "cronstream.fired", 1, 0, 0.0),
            row("cronstream", "cronstream.fired", 2, 7, 3.0),
            row("cronstream", "cronstream.jobs", 0, 900, 99.0),  # another topic: not runs
            row("other", "cronstream.fired", 0, 5, 500.0)]  # another group: not the workers
    assert lag.run_backlog(rows, "cronstream", "cronstream.fired") == {
        "slots": 47, "oldest_age_s": 12.5, "partitions": 3}
    unknown = [*rows, row("cronstream", "cronstream.fired", 3, 2, None)]
    assert lag.run_backlog(unknown, "cronstream", "cronstream.fired")["oldest_age_s"] is None
    assert lag.run_backlog([], "cronstream", "cronstream.fired") == {
        "slots": 0, "oldest_age_s": 0.0, "partitions": 0}


def test_lag_table_has_the_columns_of_kafka_consumer_groups():
    rows = [lag.PartitionLag("cronstream", "cronstream.fired", 3, 40, 45, 5, 2.5, "m-1", "/1.2"),
            lag.PartitionLag("cronstream", "cronstream.fired", 4, None, 9, None, None, None, None)]
    lines = lag.table(rows).splitlines()
    assert lines[0].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                                "LAG", "TIME-LAG-S", "CONSUMER-ID"]
    assert lines[1].split() == ["cronstream", "cronstream.fired", "3", "40", "45", "5", "2.5", "m-1"]
    assert lines[2].split() == ["cronstream", "cronstream.fired", "4", "-", "9", "-", "-", "-"]


class ListedGroups:
    """What ``AdminClient.list_consumer_groups`` answers: the groups, and a broker's error."""

    def __init__(self, errors):
        from confluent_kafka.admin import ConsumerGroupListing

        self.valid = [ConsumerGroupListing("cronstream-executor", is_simple_consumer_group=False),
                      ConsumerGroupListing("cronstream-view-1", is_simple_consumer_group=False)]
        self.errors = errors

    def list_consumer_groups(self, request_timeout):
        from concurrent.futures import Future

        answer = Future()
        answer.set_result(self)
        return answer


def test_groups_without_members_are_listed_and_a_brokers_error_is_not_an_empty_list():
    from confluent_kafka import KafkaError, KafkaException

    assert lag.groups(ListedGroups([])) == ["cronstream-executor"]  # views are ephemeral
    gone = KafkaException(KafkaError(KafkaError._TRANSPORT))
    with pytest.raises(KafkaException):
        lag.groups(ListedGroups([gone]))


def test_topics_align_skips_a_topic_not_made_yet_but_not_a_broker_gone(monkeypatch):
    from confluent_kafka import KafkaError, KafkaException

    from streams.runtime import admin
    from streams.topology import RECIPIENTS

    def answer(code):
        def topic_config(*_args):
            raise KafkaException(KafkaError(code))
        return topic_config

    monkeypatch.setattr(admin, "topic_config", answer(KafkaError.UNKNOWN_TOPIC_OR_PART))
    assert admin.align_retention("b:1", (RECIPIENTS,)) == []
    monkeypatch.setattr(admin, "topic_config", answer(KafkaError._TRANSPORT))
    with pytest.raises(KafkaException):
        admin.align_retention("b:1", (RECIPIENTS,))


def test_only_idempotently_consumed_topics_may_be_replayed():
    assert replay.topic_named("fired").name == "cronstream.fired"
    assert replay.topic_named("cronstream.fanout").name == "cronstream.fanout"
    for unsafe in ("jobs", "campaigns", "tenants", "suppressions", "recipients", "job-commands"):
        with pytest.raises(replay.ReplayError, match="cannot be replayed safely"):
            replay.topic_named(unsafe)
    with pytest.raises(replay.ReplayError, match="unknown topic 'nope'"):
        replay.topic_named("nope")


def test_replay_ranges_are_clamped_to_what_the_partition_holds():
    assert replay.clamp(2, 5, 9, 0, 20) == replay.Range(2, 5, 9)
    assert replay.clamp(2, None, None, 3, 20) == replay.Range(2, 3, 20)
    assert replay.clamp(2, 0, 100, 3, 20) == replay.Range(2, 3, 20)  # retention took 0..2
    assert replay.clamp(2, 30, 40, 3, 20).count == 0
    assert replay.clamp(2, 9, 5, 0, 20).count == 0


def test_replay_times_must_be_rfc3339_with_an_offset():
    assert replay.epoch_ms("1970-01-01T00:00:01Z", "--from-time") == 1000
    with pytest.raises(replay.ReplayError, match="--from-time: 'yesterday' is not an RFC 3339"):
        replay.epoch_ms("yesterday", "--from-time")
    with pytest.raises(replay.ReplayError, match="--to-time: .* needs a UTC offset"):
        replay.epoch_ms("2026-01-01T00:00:00", "--to-time")


def view(status: str, recipients: int, pending: int, **counts: int) -> dict:
    return {"id": "c1", "status": status, "recipients": recipients, "rate_per_s": 250.0,
            "eta_s": 40 if pending else None, "counts": {**counts, "pending": pending}}


def test_campaign_progress_line_shows_bar_rate_eta_and_outcomes():
    line = progress.campaign_line(view("sending", 1000, 750, sent=240, suppressed=10))
    assert "[#######" in line and " 25.0%" in line and "250/1000" in line
    assert "250/s" in line and "ETA 0h00m40s" in line and "sent=240 suppressed=10" in line
    assert progress.bar(0, 0).endswith("100.0%")  # an empty campaign is complete, not 0/0


def test_watch_ends_when_every_recipient_has_an_outcome():
    assert not progress.finished(view("sending", 10, 3, sent=7))
    assert not progress.finished(view("cancelled", 10, 3, sent=7))  # cancellations still landing
    assert progress.finished(view("done", 10, 0, sent=10))
    assert progress.finished(view("cancelled", 10, 0, sent=7, cancelled=3))


def test_watch_prints_until_done():
    views = iter([view("sending", 10, 5, sent=5), view("done", 10, 0, sent=10)])
    out = _Out()
    final = progress.watch(lambda: next(views), 0, None, out)
    assert final["status"] == "done" and len(out.lines) == 2 and "100.0%" in out.lines[-1]


class _Out:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> None:
        self.lines += [t for t in text.splitlines() if t]

    def flush(self) -> None:
        pass


def test_api_errors_are_one_line_naming_the_field():
    body = {"detail": [{"loc": ["body", "schedule", "cron"], "msg": "bad field", "type": "x"},
                       {"loc": ["query", "limit"], "msg": "too big", "type": "y"}]}
    assert describe(body) == "schedule.cron: bad field; limit: too big"
    assert describe({"detail": "unknown API key"}) == "unknown API key"


def test_job_files_are_yaml_or_json_one_or_many(tmp_path):
    (tmp_path / "one.yaml").write_text("schedule:\n  cron: '* * * * *'\n")
    (tmp_path / "many.json").write_text(json.dumps([{"a": 1}, {"b": 2}]))
    (tmp_path / "bad.yaml").write_text("a: [1,\n")
    (tmp_path / "scalar.yaml").write_text("- 3\n")
    assert load_documents(str(tmp_path / "one.yaml")) == [{"schedule": {"cron": "* * * * *"}}]
    assert len(load_documents(str(tmp_path / "many.json"))) == 2
    for name, message in (("bad.yaml", "not valid YAML"), ("scalar.yaml", "not a mapping"),
                          ("missing.yaml", "No such file")):
        with pytest.raises(CliError, match=message) as caught:
            load_documents(str(tmp_path / name))
        assert caught.value.code == 2


def test_health_turns_unavailable_when_the_loop_stops_ticking():
    health = WorkerHealth(started=0.0)
    assert health.live(1.0)[0]  # starting: not stalled yet
    assert not health.ready(1.0)[0]  # but not ready: nothing recovered
    health.tick()
    health.last_tick = 100.0
    health.recovered, health.partitions = True, [0, 1]
    assert health.ready(101.0)[0]
    assert not health.live(100.0 + STALL_S + 1)[0]
    assert not health.ready(100.0 + STALL_S + 1)[0]
