"""``cronstream stack``: idempotent up, clear errors, and a down that stops exactly our processes."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from dataclasses import replace

import pytest

from stack import processes
from stack.local import BROKER_INDEX_BYTES, Stack, StackError
from streams.runtime.kafka_config import replication_for
from streams.topology import FIRED


def test_up_twice_is_harmless(stack, capsys):
    names = ("kafka", "connect", "ses", "worker-1", "api")
    before = {name: processes.alive(stack.pidfile(name)) for name in names}
    capsys.readouterr()
    stack.up(with_app=True)
    said = capsys.readouterr().out
    after = {name: processes.alive(stack.pidfile(name)) for name in names}
    assert before == after and all(after.values())
    assert stack.status()["postgres"] == "running"
    # every component found running, so nothing started, formatted or created again (and no
    # start-up waited for): what ``up`` says it did
    for component in ("postgres", "kafka", "kafka connect", "local SES server", "worker-1", "api"):
        assert f"[stack] {component} already running" in said, said
    assert not re.search(r"\[stack\] (starting|initialising|created topics)", said), said


def test_a_port_in_use_is_a_clear_error(stack, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        other = Stack(replace(stack.s, home=tmp_path, kafka_port=port))
        with pytest.raises(StackError, match=rf"kafka: port {port} is already in use"):
            other.start_kafka()


def test_status_command_lists_components(stack):
    out = subprocess.run([sys.executable, "-m", "cli.main", "stack", "status"],
                         capture_output=True, text=True, check=True).stdout
    for name in ("kafka", "connect", "postgres", "api", "worker-1"):
        assert name in out
    # the replication every cronstream topic should have, and none below it (one broker: 1/1)
    want = replication_for(stack.brokers)
    assert (f"replication  factor {want.factor}, min.insync.replicas {want.min_insync}: every "
            "cronstream topic ok") in out, out


def test_every_topic_names_its_minimum_isr(stack):
    """Topics are created with the replication setting's ``min.insync.replicas`` as their own
    config (``streams.runtime.kafka_config``), Connect's internal topics included."""
    from streams.runtime import admin

    want = str(replication_for(stack.brokers).min_insync)
    for name in (FIRED.name, "cronstream-jobs-changelog", "cronstream-connect-offsets"):
        assert admin.topic_config(stack.s.bootstrap, name, "min.insync.replicas") == want
    assert admin.replication_shortfall(stack.s.bootstrap) == []


def test_the_broker_preallocates_small_indexes(stack):
    """A new segment's index is a sparse file of ``log.index.size.max.bytes``; at Kafka's 10 MiB,
    the kernel's read-ahead zeroed megabytes of it on the first write to every new partition,
    about a second of the broker's CPU in a fresh stack's first spike."""
    from confluent_kafka.admin import ConfigResource

    from streams.runtime import admin

    resource = ConfigResource(ConfigResource.Type.TOPIC, FIRED.name)
    configs = admin.client(stack.s.bootstrap).describe_configs([resource])[resource].result(30)
    assert int(configs["segment.index.bytes"].value) == BROKER_INDEX_BYTES
    index = next((stack.s.home / "kafka" / "data" / f"{FIRED.name}-0").glob("*.index"))
    assert index.stat().st_size <= BROKER_INDEX_BYTES


def test_the_broker_lets_the_workers_session_end_within_seconds(stack):
    """A dead worker's partitions move once its group session ends (``Settings.group_session``,
    2 s); Kafka's default ``group.min.session.timeout.ms`` (6 s) refuses such a member, so the
    local stack lowers it, and a worker asks the brokers at its start: refused, it stops with a
    line naming the setting instead of dying on faust's InvalidSessionTimeoutError."""
    from streams.runtime import admin

    assert admin.group_session_problem(stack.s.bootstrap, stack.s.group_session[0]) is None
    problem = admin.group_session_problem(stack.s.bootstrap, 0.5)
    assert problem is not None
    assert problem.startswith("CRONSTREAM_GROUP_SESSION_TIMEOUT_S=0.5 is outside"), problem
    assert "group.min.session.timeout.ms=1000" in problem, problem
