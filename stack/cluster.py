"""Fault operations on the local stack's KRaft cluster (``stack up --brokers 3``): which node
leads which partitions, which node is the active controller, SIGKILL or stop one node by its pid
and start it again, and wait until every replica is back in sync.

The fault suite's cluster scenarios (``tests/chaos/test_cluster_faults.py``) use them; they act
on one node of a running stack and on nothing else (pid files, ``stack.processes``). Every
question to the cluster is asked from a short-lived child process (``stack.isolated``): the
caller, a test run, lives through the very broker kills these helpers make, and a librdkafka
client kept in it across a broker's death was seen to abort it.

The ``*_of`` functions below run in that child; call the ``Stack``-taking ones.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections import Counter

from stack import isolated, processes
from stack.local import Stack, StackError

# -- run in the child (stack.isolated) --------------------------------------------------------


def leaders_of(bootstrap: str, topics: list[str], timeout_s: float = 10.0
               ) -> dict[str, dict[str, int]]:
    """Each partition's leader node per topic (``{topic: {partition: node}}``, partition as a
    string: the child answers in JSON); -1 for a partition without a leader."""
    from streams.runtime import admin

    metadata = admin.client(bootstrap).list_topics(timeout=timeout_s)
    return {topic: {str(p): meta.leader for p, meta in metadata.topics[topic].partitions.items()}
            for topic in topics}


def out_of_sync_of(bootstrap: str, timeout_s: float = 10.0) -> list[str]:
    """Every partition whose in-sync replicas are fewer than its replicas, or that has no
    leader (``topic-partition: isr [..] of [..]``); empty when the cluster is whole."""
    from streams.runtime import admin

    metadata = admin.client(bootstrap).list_topics(timeout=timeout_s)
    found = []
    for name, topic in sorted(metadata.topics.items()):
        if topic.error is not None:
            found.append(f"{name}: {topic.error}")
            continue
        for p, meta in sorted(topic.partitions.items()):
            if meta.leader < 0 or set(meta.isrs) != set(meta.replicas):
                found.append(f"{name}-{p}: leader {meta.leader}, isr {sorted(meta.isrs)} of "
                             f"{sorted(meta.replicas)}")
    return found


# -- for the caller ---------------------------------------------------------------------------


def leaders(stack: Stack, topics: list[str]) -> dict[str, dict[int, int]]:
    """Each partition's leader node per topic, as the cluster's metadata says now."""
    answer = isolated.call("stack.cluster:leaders_of", stack.s.bootstrap, topics, timeout_s=60,
                           env=stack.kafka_env())
    return {topic: {int(p): node for p, node in parts.items()} for topic, parts in answer.items()}


def busiest_leader(stack: Stack, topics: list[str]) -> tuple[int, int]:
    """The node leading most partitions of ``topics`` together, and how many it leads (the
    lowest node id on a tie)."""
    counts = Counter(node for parts in leaders(stack, topics).values()
                     for node in parts.values() if node >= 0)
    node, led = min(counts.items(), key=lambda item: (-item[1], item[0]))
    return node, led


def active_controller(stack: Stack) -> int:
    """The node id of the active KRaft controller (the quorum's leader), from Kafka's own
    ``kafka-metadata-quorum describe --status`` (``MetadataQuorumCommand``). Why not the admin
    client's ``describe_cluster``: on KRaft its ``controller`` is a random live broker, not the
    quorum's leader (Kafka's KRaftMetadataCache answers a random live broker), so a test killing
    it would often kill a follower."""
    node = next(n for n in range(1, stack.brokers + 1)
                if processes.alive(stack.pidfile(stack.node_name(n))))
    argv = stack.home.java("kafka-metadata-quorum", "org.apache.kafka.tools.MetadataQuorumCommand",
                           "128m", "--bootstrap-controller", f"127.0.0.1:{stack.node_ports(node)[1]}",
                           "describe", "--status")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    found = re.search(r"^LeaderId:\s+(\d+)", out.stdout, re.M)
    if out.returncode != 0 or found is None:
        raise StackError("kafka", f"kafka-metadata-quorum found no leader (exit "
                         f"{out.returncode}): {(out.stdout + out.stderr)[-600:]}")
    return int(found.group(1))


def kill_node(stack: Stack, node: int) -> int:
    """SIGKILL node ``node``'s JVM (broker and controller) and wait until it is gone; its pid.
    Nothing is flushed or handed over: the cluster learns of it when the node's session runs
    out (``broker.session.timeout.ms``) or its controller connections drop."""
    pidfile = stack.pidfile(stack.node_name(node))
    pid = processes.alive(pidfile)
    if pid is None:
        raise StackError(stack.node_name(node), "not running, nothing to kill")
    os.kill(pid, signal.SIGKILL)
    while processes.alive(pidfile) == pid:
        processes._reap(pid)  # a node this process started stays a zombie until reaped
        time.sleep(0.05)
    return pid


def stop_node(stack: Stack, node: int, timeout_s: float = 60.0) -> None:
    """Stop node ``node`` cleanly (SIGTERM: a controlled shutdown that moves its leaderships
    away first), SIGKILL after ``timeout_s``."""
    if not processes.stop(stack.pidfile(stack.node_name(node)), timeout_s=timeout_s):
        raise StackError(stack.node_name(node), "not running, nothing to stop")


def start_node(stack: Stack, node: int, timeout_s: float = 300.0) -> None:
    """Start node ``node`` again (its data dir kept) and wait until the cluster lists every
    broker: the node has caught up with the metadata log and registered."""
    if not stack.start_kafka_node(node, stack.brokers):
        raise StackError(stack.node_name(node), "already running")
    deadline = time.monotonic() + timeout_s
    while not stack.kafka_healthy():
        if processes.alive(stack.pidfile(stack.node_name(node))) is None:
            raise StackError(stack.node_name(node), "exited during start-up",
                             stack.log(stack.node_name(node)))
        if time.monotonic() > deadline:
            raise StackError(stack.node_name(node), f"not listed after {timeout_s:.0f}s",
                             stack.log(stack.node_name(node)))
        time.sleep(0.5)


def out_of_sync(stack: Stack) -> list[str]:
    """Every partition short of in-sync replicas or of a leader (``out_of_sync_of``)."""
    return isolated.call("stack.cluster:out_of_sync_of", stack.s.bootstrap, timeout_s=60,
                         env=stack.kafka_env())


def wait_in_sync(stack: Stack, timeout_s: float = 300.0, every_s: float = 2.0) -> float:
    """Wait until every partition of every topic has all its replicas in sync (a restarted
    node has caught up on every partition it holds); the seconds it took."""
    started = time.monotonic()
    left: list[str] = []
    while time.monotonic() - started < timeout_s:
        try:
            left = out_of_sync(stack)
        except isolated.ChildCallFailed as exc:
            left = [str(exc)[-300:]]
        if not left:
            return time.monotonic() - started
        time.sleep(every_s)
    raise StackError("kafka", f"{len(left)} partitions still out of sync after "
                     f"{timeout_s:.0f}s, e.g. {left[:3]}")
