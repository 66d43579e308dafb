"""Shared fixtures and the suite's order. Integration tests run on the real local stack, which
``stack`` starts."""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Iterable, Iterator

import httpx
import pytest

from cli.demo import wait_for_key
from stack import isolated
from stack.local import Stack, port_taken
from streams.runtime import settings

# Fast feedback first: the unit tests (seconds, no broker), then the integration tests (the stack
# starts at the first of them), then the attacks of ``tests/security/`` on the same stack, then
# the fault suite (minutes of injected faults), whatever order
# the paths were given or collected in (``tests/chaos`` sorts before ``tests/integration``). Tests
# marked ``end_of_session`` come after all of them, in file name order: they read or stop what
# the whole session used (the secrets scan of every log, then ``stack down``), the fault suite's
# included.
SUITES = ("tests/unit/", "tests/integration/", "tests/security/", "tests/chaos/")


def suite_order(item: pytest.Item) -> tuple[int, str]:
    if item.get_closest_marker("end_of_session"):
        return len(SUITES) + 1, item.path.name
    path = item.path.as_posix()
    return next((rank for rank, suite in enumerate(SUITES) if f"/{suite}" in path), len(SUITES)), ""


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A stable sort: within a suite the collection order is kept. Last of the hooks, so no
    plugin's reordering undoes it."""
    items.sort(key=suite_order)


# where free_port draws from: below the kernel's ephemeral range (32768-60999 here), where every
# client connection takes its local port (a port found free there was taken by a connection
# minutes later, and a secure stack's restarted worker could not bind it: CI, 2026-11-28), and
# below the suite's stacks (the session's from 15432, three brokers' +10000, regions' +8000)
FREE_PORTS = range(10000, 15000)


def cluster_partitions() -> int:
    """The partition count of the stack's partitioned topics (``Settings.partitions``, from the
    environment the stack under test was started with): what ``partition_for`` and
    ``TopicSpec.count`` are given."""
    return settings.load().partitions


def free_port() -> int:
    """A port nothing listens on, outside the ephemeral range (``FREE_PORTS``)."""
    for _ in range(500):
        port = random.randrange(FREE_PORTS.start, FREE_PORTS.stop)
        if not port_taken(port):
            return port
    raise RuntimeError(f"no free port in {FREE_PORTS}")


def free_port_block(offsets: Iterable[int]) -> int:
    """A free port p with p + each of ``offsets`` free too on loopback: for a stack whose other
    ports count from its Kafka port (the nodes of ``--brokers 3``, a secure node's mTLS and
    OAUTHBEARER listeners: ``Stack.node_ports``, ``Stack.auth_port``)."""
    wanted = tuple(offsets)
    for _ in range(50):
        port = free_port()
        if port + max(wanted, default=0) < 65000 and not any(port_taken(port + o) for o in wanted):
            return port
    raise RuntimeError(f"no free block of ports at offsets {wanted}")


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    """The local stack with one worker and the API; stopped afterwards if this session started it."""
    # a small per-host limit (streams.execution.dispatch), so the isolation tests see it with
    # tens of slots rather than hundreds; they read the worker's own value from its /metrics
    os.environ.setdefault("CRONSTREAM_RUNS_PER_HOST", "8")
    # a reputation guard that trips on a test's few hundred sends (tests/integration/
    # test_reputation_guard.py): 10 sends per partition and a 20 % complaint rate, far above
    # what the other tests' simulator addresses produce per tenant and partition
    os.environ.setdefault("CRONSTREAM_GUARD_MIN_SENDS", "10")
    os.environ.setdefault("CRONSTREAM_GUARD_COMPLAINT_RATE", "0.2")
    os.environ.setdefault("CRONSTREAM_GUARD_BOUNCE_RATE", "0.5")
    s = Stack(settings.load())
    was_running = s.status().get("kafka", "").startswith("running")
    # CRONSTREAM_BROKERS=3: the same suite on a three-broker cluster (docs/testing.md), in a
    # home of its own (a home's broker count is fixed when its cluster is formatted)
    brokers = os.environ.get("CRONSTREAM_BROKERS")
    s.up(with_app=True, brokers=int(brokers) if brokers else None)
    os.environ.update(s.app_env())  # the tests read what the app writes (e.g. signed tokens)
    yield s
    if not was_running and not os.environ.get("CRONSTREAM_KEEP_STACK"):
        s.down()


TEST_SENDERS = ("example.com", "example.org")


def make_client(stack: Stack, **options) -> httpx.Client:
    name = options.pop("name", None) or f"t{uuid.uuid4().hex[:10]}"
    options.setdefault("allowed_targets", ["127.0.0.1"])
    # the suite's campaigns and reminders come from these domains (a tenant sends no mail as
    # anyone the operator did not grant: streams.adapters.tenants.mail_refused)
    options.setdefault("senders", list(TEST_SENDERS))
    # from a child process: the test run lives through the fault suite's broker restart, and a
    # librdkafka client it kept (tenants.create makes an AdminClient) can abort it there
    key = isolated.call("streams.adapters.tenants:create", stack.s.bootstrap, name, timeout_s=120,
                        partitions=stack.s.partitions, **options)
    auth = {"Authorization": f"Bearer {key}"}
    wait_for_key(stack.s.api_url, auth)
    client = httpx.Client(base_url=stack.s.api_url, headers=auth, timeout=30)
    client.tenant = name  # type: ignore[attr-defined]
    return client


@pytest.fixture
def api(stack) -> Iterator[httpx.Client]:
    """An API client authenticated as a fresh tenant allowed to call loopback webhooks."""
    with make_client(stack) as client:
        yield client
