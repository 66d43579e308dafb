"""``stack up --brokers 3``: three KRaft nodes (broker + controller each, a three-voter quorum) on
loopback, every cronstream topic replicated three times with ``min.insync.replicas`` 2, and a topic
below that reported by ``stack status`` (issue 29, items 1 and 2).

Kafka only, in a home and on ports of its own beside the suite's one-broker stack: three JVMs of
512 MiB, about a minute on two cores. The whole stack on three brokers (Connect, workers, API) is
``CRONSTREAM_BROKERS=3`` with a home of its own (docs/testing.md).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace

import pytest

from stack import isolated, processes
from stack.local import Stack
from streams.runtime import settings
from streams.runtime.admin import CONNECT_TOPICS, changelog_topics
from streams.runtime.settings import REPO_ROOT
from streams.topology import TOPICS
from tests.conftest import free_port_block


def free_ports_for_three() -> tuple[int, int]:
    """A client port p and controller port with p+100..p+103 free too (nodes 2 and 3)."""
    port = free_port_block((1, *range(100, 104)))
    return port, port + 1


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Stack:
    main = settings.load()
    home = tmp_path_factory.mktemp("three-brokers")
    (home / "lib").symlink_to(main.home / "lib")  # the jars the suite's stack fetched
    port, controller = free_ports_for_three()
    stack = Stack(replace(main, home=home, kafka_port=port, controller_port=controller))
    stack.start_kafka(brokers=3)
    try:
        isolated.call("streams.runtime.admin:prepare_cluster", stack.s.bootstrap,
                      stack.s.partitions, timeout_s=300)
        yield stack
    finally:
        stack.down()


def cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CRONSTREAM_HOME": str(stack.s.home),
           "CRONSTREAM_KAFKA_PORT": str(stack.s.kafka_port),
           "CRONSTREAM_CONTROLLER_PORT": str(stack.s.controller_port)}
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True,
                          text=True, timeout=180, env=env, cwd=REPO_ROOT)


def test_three_nodes_run_and_every_client_knows_them(three: Stack) -> None:
    assert three.brokers == 3
    assert three.s.bootstrap.count(",") == 2  # every broker, so node 1's loss is no outage
    status = cli(three, "stack", "status").stdout
    for node in ("kafka", "kafka-2", "kafka-3"):
        assert re.search(rf"^{node}\s+running", status, re.M), status
    lag = cli(three, "lag")
    assert lag.returncode == 0, lag.stderr


def test_every_cronstream_topic_has_rf_3_and_min_isr_2(three: Stack) -> None:
    described = cli(three, "kafka", "topics", "--describe")
    assert described.returncode == 0, described.stderr
    heads = {m["topic"]: m for m in re.finditer(
        r"^Topic: (?P<topic>\S+)\s+TopicId: \S+\s+PartitionCount: (?P<parts>\d+)\s+"
        r"ReplicationFactor: (?P<rf>\d+)\s+Configs: (?P<configs>\S*)", described.stdout, re.M)}
    wanted = {t.name for t in (*TOPICS, *changelog_topics(), *CONNECT_TOPICS)}
    assert wanted <= set(heads), sorted(wanted - set(heads))
    for name in wanted:
        assert heads[name]["rf"] == "3", heads[name].group(0)
        assert "min.insync.replicas=2" in heads[name]["configs"], heads[name].group(0)
    # every partition's replicas are in sync on three distinct brokers
    isr = re.findall(r"^\s+Topic: (cronstream\S+)\s+Partition: \d+\s+Leader: \d+\s+"
                     r"Replicas: (\S+)\s+Isr: (\S+)", described.stdout, re.M)
    assert isr and all(len(set(r.split(","))) == 3 and set(r.split(",")) == set(i.split(","))
                       for _, r, i in isr)
    assert "replication  factor 3, min.insync.replicas 2: every cronstream topic ok" in cli(
        three, "stack", "status").stdout


def test_a_topic_below_the_setting_is_reported(three: Stack) -> None:
    made = cli(three, "kafka", "topics", "--create", "--topic", "cronstream-legacy",
               "--partitions", "1", "--replication-factor", "1")
    assert made.returncode == 0, made.stderr
    status = cli(three, "stack", "status").stdout
    assert "cronstream-legacy: replication factor 1 < 3" in status, status
    assert "cronstream-legacy: min.insync.replicas" not in status  # broker default: 2 here


def test_down_stops_every_node(three: Stack) -> None:
    pids = [processes.alive(three.pidfile(three.node_name(n))) for n in (1, 2, 3)]
    assert all(pids)
    three.down()
    assert not any(processes.alive(three.pidfile(three.node_name(n))) for n in (1, 2, 3))
