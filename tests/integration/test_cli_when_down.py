"""Every command ``cronstream --help`` lists, against a stack that is stopped and against a secure
stack whose client settings are not in the environment (issue 46): no traceback, the exit code of
``cli.failures.EXITS``, and when it fails one line naming what it tried and the cause.

The secure stack is Kafka alone (SASL_SSL, with its mTLS and OAUTHBEARER listeners) in a home and
on ports of its own, started once here and stopped at the end; nothing else of it runs, so the
commands that need the API, Connect, PostgreSQL or SES find them stopped there too. The CLI's
environment names only that home and its ports: every Kafka command must read the home's client
settings itself, and a client that cannot (another home) or is given a wrong one must say so.
The stopped stack is a home whose ports nothing listens on. ``stack up`` and ``demo`` would start
what is stopped, so they are run where they cannot: with PostgreSQL's port held by this test.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from cli.failures import DENIED, FAILED, OK, UNREACHABLE
from stack import isolated
from stack.local import EXTRA_LISTENERS, Stack
from streams.runtime import settings
from streams.runtime.settings import REPO_ROOT
from tests.conftest import free_port, free_port_block

SECRET = "0123456789abcdef-unsubscribe"
WRONG_PASSWORD = "not-the-password-46"


@dataclass(frozen=True)
class Case:
    """One run of a command: what it must exit with, and what its output must say (on stderr
    when it fails, else on stdout). ``env``: settings of its own over the pass's."""

    argv: tuple[str, ...]
    code: int
    says: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Home:
    """A stack's home as the CLI sees it: the environment naming it and its ports, nothing else
    of cronstream's (no Kafka client setting, no URL); and what no output may show."""

    env: dict[str, str]
    stack: Stack
    secrets: tuple[str, ...] = (WRONG_PASSWORD, SECRET)


def environment(stack: Stack, **extra: str) -> dict[str, str]:
    """The process environment without any ``CRONSTREAM_*`` or AWS setting of the test run's
    (the suite's stack put its own there), then ``stack``'s home and ports and ``extra``."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("CRONSTREAM_", "AWS_"))}
    return {**base, **stack.settings_env(), "CRONSTREAM_UNSUBSCRIBE_SECRET": SECRET,
            "CRONSTREAM_SES_ENDPOINT": f"http://127.0.0.1:{stack.s.ses_port}",
            "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local",
            "AWS_REGION": "us-east-1", **extra}


def new_home(tmp: Path, kafka_port: int | None = None) -> Stack:
    """A home with the suite's jars and plugins (fetched and built once) and ports of its own."""
    main = settings.load()
    Stack(main).ensure_java_parts()  # on a fresh clone this file may run before any other
    for shared in ("lib", "plugins"):
        (tmp / shared).symlink_to(main.home / shared)
    for marker in main.home.glob(".java-parts-*"):
        shutil.copy(marker, tmp / marker.name)
    ports = {name: free_port() for name in ("controller", "connect", "pg", "api", "ses", "web")}
    return Stack(replace(main, home=tmp, kafka_port=kafka_port or free_port(),
                         controller_port=ports["controller"], connect_port=ports["connect"],
                         pg_port=ports["pg"], api_port=ports["api"], ses_port=ports["ses"],
                         worker_web_port=ports["web"], worker_metrics_port=free_port()))


def cronstream(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    """The command as an operator runs it; the timeout only guards the test against a hang."""
    return subprocess.run([sys.executable, "-m", "cli.main", *argv], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=180)


class HeldPort:
    """A port something else listens on and never answers at (PostgreSQL's, for ``stack up``
    and ``demo``; a silent Kafka for ``lag``)."""

    def __enter__(self) -> int:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        return int(self.sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def listed_commands() -> set[str]:
    """The commands ``cronstream --help`` lists."""
    shown = cronstream(dict(os.environ), "--help")
    assert shown.returncode == 0, shown.stderr
    return set(re.search(r"\{([a-z,-]+)\}", shown.stdout).group(1).split(","))


SERVICES = ("worker", "api")  # they log while they wait; their last line is the cause


def judge(case: Case, run: subprocess.CompletedProcess[str], secrets: tuple[str, ...]) -> None:
    everything = run.stdout + run.stderr
    where = f"cronstream {' '.join(case.argv)} -> {run.returncode}\n{everything[-3000:]}"
    assert run.returncode == case.code, where
    assert "Traceback" not in everything, where
    assert "%3|" not in everything and "|FAIL|" not in everything, where  # librdkafka's own
    assert not [secret for secret in secrets if secret in everything], where
    if case.code == OK:
        said = run.stdout
    else:
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        if case.argv[0] not in SERVICES:
            assert len(lines) == 1, where  # one line, nothing else
        said = lines[-1]
        assert said.startswith(f"cronstream {case.argv[0]}"), where
    for words in case.says:
        assert words in said, where


def run_all(cases: list[Case], home: Home) -> None:
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(lambda c: cronstream({**home.env, **c.env}, *c.argv), cases))
    for case, run in zip(cases, runs, strict=True):
        judge(case, run, home.secrets)


# -- the secure stack, its client settings not in the environment --------------------------------
@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory,
           waiting_services: dict[str, subprocess.Popen[str]]) -> Iterator[Home]:
    """Kafka alone, ``--secure``, with the topics and the workers' and executor's groups as
    ``stack up`` makes them (the services waiting on the stopped stack meanwhile)."""
    # the mTLS and OAUTHBEARER listeners' ports count from the Kafka port (Stack.auth_port)
    kafka = free_port_block(offset for _, _, offset in EXTRA_LISTENERS.values())
    stack = new_home(tmp_path_factory.mktemp("secure46"), kafka_port=kafka)
    try:
        stack.start_kafka(brokers=1, secure=True)
        isolated.call("streams.runtime.admin:prepare_cluster", stack.s.bootstrap,
                      stack.s.partitions, env=stack.kafka_env(), timeout_s=300)
        password = stack.kafka_env()["CRONSTREAM_KAFKA_SASL_PASSWORD"]
        yield Home(environment(stack), stack, (password, WRONG_PASSWORD, SECRET))
    finally:
        stack.down()


def secure_cases(home: Home, held_pg: int, other_home: Path) -> dict[str, list[Case]]:
    s = home.stack.s
    sasl = f"kafka at 127.0.0.1:{s.kafka_port} (SASL_SSL, SCRAM-SHA-512)"
    wrong = {"CRONSTREAM_KAFKA_SASL_PASSWORD": WRONG_PASSWORD}
    refused = (f"{sasl}: SASL authentication failed",)
    api = (f"the API at http://127.0.0.1:{s.api_port}: connection refused",)
    port_held = {"CRONSTREAM_PG_PORT": str(held_pg)}
    mtls = f"127.0.0.1:{home.stack.auth_port(1, 'mtls')}"
    return {
        "stack": [Case(("stack", "status"), OK, ("running (pid", "every cronstream topic ok")),
                  Case(("stack", "up"), FAILED, (f"port {held_pg} is already in use",), port_held)],
        "tenant": [Case(("tenant", "create", "sec", "--json"), OK, ('"api_key": "cs_',)),
                   Case(("tenant", "create", "sec2"), DENIED, refused, wrong)],
        "sink": [Case(("sink", "register", "--schemas-dir", "schemas"), UNREACHABLE,
                      (f"postgresql at 127.0.0.1:{s.pg_port}", "connection refused"))],
        "topics": [Case(("topics", "align"), OK, ("every topic as declared",))],
        "recipients": [Case(("recipients", "prune", "--dry-run"), OK, ("(0 records would go)",))],
        "config": [Case(("config", "check"), OK, ("SASL_SSL  [home]", "****  [home]"))],
        "jobs": [Case(("jobs", "list", "--api-key", "cs_x"), UNREACHABLE, api)],
        "campaigns": [Case(("campaigns", "get", "c1", "--api-key", "cs_x"), UNREACHABLE, api)],
        "suppressions": [Case(("suppressions", "remove", "a@example.com", "--api-key", "cs_x"),
                              UNREACHABLE, api)],
        # the fired topic's offsets are the executor's group's, which has no members
        "lag": [Case(("lag",), OK, ("cronstream-executor  cronstream.fired", "cronstream  ")),
                Case(("lag", "--bootstrap", mtls), OK, ("cronstream-executor",)),
                # the original report: a client that cannot know the home's settings
                Case(("lag",), DENIED, (f"kafka at 127.0.0.1:{s.kafka_port} (PLAINTEXT): the "
                                        "broker closed the connection at once; it may expect TLS",),
                     {"CRONSTREAM_HOME": str(other_home),
                      "CRONSTREAM_BOOTSTRAP": f"127.0.0.1:{s.kafka_port}"})],
        "topology": [Case(("topology", "--format", "mermaid"), OK, ("flowchart LR",))],
        "replay": [Case(("replay", "--topic", "fired", "--from-offset", "0", "--dry-run"), OK,
                        ("would copy cronstream.fired: 0 records",))],
        "ses-events": [Case(("ses-events", "--tenant", "t", "--topic-arn", "arn:aws:sns:x"),
                            UNREACHABLE, (f"ses at http://127.0.0.1:{s.ses_port}",))],
        "kafka": [Case(("kafka", "topics", "--list"), OK, ("cronstream.fired",))],
        "demo": [Case(("demo",), FAILED, (f"port {held_pg} is already in use",), port_held)],
        "region": [Case(("region", "status"), UNREACHABLE,
                        (f"postgresql at 127.0.0.1:{s.pg_port}", "connection refused"))],
        # the services too read the home, and an explicit setting wins over it
        "worker": [Case(("worker",), DENIED, refused, wrong)],
        "api": [Case(("api",), DENIED, refused, wrong)],
    }


def test_every_command_against_a_secure_stack_without_its_client_settings(
        secure: Home, stopped: Home) -> None:
    with HeldPort() as held_pg:
        cases = secure_cases(secure, held_pg, stopped.stack.s.home)
        assert set(cases) == listed_commands()
        run_all([c for runs in cases.values() for c in runs], secure)
    # the tenant the CLI made is on the secure cluster: its update reads it back over SASL_SSL
    updated = cronstream(secure.env, "tenant", "update", "sec", "--sender", "example.com")
    judge(Case(("tenant", "update"), OK, ("tenant sec: senders example.com",)), updated,
          secure.secrets)


# -- the stopped stack ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Home]:
    stack = new_home(tmp_path_factory.mktemp("stopped"))
    yield Home(environment(stack), stack)


@pytest.fixture(scope="module")
def waiting_services(stopped: Home) -> Iterator[dict[str, subprocess.Popen[str]]]:
    """The worker and the API started against the stopped stack now: each waits a minute for a
    broker before it gives up, which the secure stack's start overlaps."""
    started = {name: subprocess.Popen([sys.executable, "-m", "cli.main", name], env=stopped.env,
                                      cwd=REPO_ROOT, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
               for name in SERVICES}
    yield started
    for child in started.values():
        if child.poll() is None:
            child.kill()
        child.communicate()


def stopped_cases(home: Home, held_pg: int) -> dict[str, list[Case]]:
    s = home.stack.s
    kafka = (f"kafka at 127.0.0.1:{s.kafka_port} (PLAINTEXT): connection refused",)
    api = (f"the API at http://127.0.0.1:{s.api_port}: connection refused",)
    pg = (f"postgresql at 127.0.0.1:{s.pg_port} (sslmode prefer", "connection refused")
    port_held = {"CRONSTREAM_PG_PORT": str(held_pg)}
    return {
        "stack": [Case(("stack", "status"), OK, ("kafka        stopped", "postgres     stopped")),
                  Case(("stack", "up"), FAILED, (f"port {held_pg} is already in use",), port_held)],
        "tenant": [Case(("tenant", "create", "zz"), UNREACHABLE, kafka),
                   Case(("tenant", "update", "zz", "--sender", "example.com"), UNREACHABLE, kafka)],
        "sink": [Case(("sink", "register", "--schemas-dir", "schemas"), UNREACHABLE, pg)],
        "topics": [Case(("topics", "align"), UNREACHABLE, kafka)],
        "recipients": [Case(("recipients", "prune", "--dry-run"), UNREACHABLE, kafka)],
        "config": [Case(("config", "check"), OK, (f"127.0.0.1:{s.kafka_port}  [default]",))],
        "jobs": [Case(("jobs", "list", "--api-key", "cs_x"), UNREACHABLE, api)],
        "campaigns": [Case(("campaigns", "get", "c1", "--api-key", "cs_x"), UNREACHABLE, api)],
        "suppressions": [Case(("suppressions", "add", "a@example.com", "--api-key", "cs_x"),
                              UNREACHABLE, api)],
        "lag": [Case(("lag",), UNREACHABLE, kafka),
                # a listener that never answers (the held port): silence, said after a wait
                Case(("lag",), UNREACHABLE, ("(PLAINTEXT): timed out, no broker answered within "
                                             "10s",), {"CRONSTREAM_BOOTSTRAP": f"127.0.0.1:{held_pg}"})],
        "topology": [Case(("topology",), OK, ("client: execute_fired",))],
        "replay": [Case(("replay", "--topic", "fired", "--from-offset", "0"), UNREACHABLE, kafka)],
        "ses-events": [Case(("ses-events", "--tenant", "t", "--topic-arn", "arn:aws:sns:x"),
                            UNREACHABLE, (f"ses at http://127.0.0.1:{s.ses_port}: connection "
                                          "refused",))],
        "kafka": [Case(("kafka", "topics", "--list"), UNREACHABLE, kafka)],
        "demo": [Case(("demo",), FAILED, (f"port {held_pg} is already in use",), port_held)],
        # the active-region authority is a row in the PostgreSQL of record
        "region": [Case(("region", "status"), UNREACHABLE, pg),
                   Case(("region", "promote", "--to", "b", "--unplanned"), UNREACHABLE, pg)],
        "worker": [Case(("worker",), UNREACHABLE, kafka)],
        "api": [Case(("api",), UNREACHABLE, kafka)],
    }


def test_every_command_against_a_stopped_stack(
        stopped: Home, waiting_services: dict[str, subprocess.Popen[str]]) -> None:
    with HeldPort() as held_pg:
        cases = stopped_cases(stopped, held_pg)
        assert set(cases) == listed_commands()
        run_all([c for name, runs in cases.items() if name not in SERVICES for c in runs],
                stopped)
    for name, child in waiting_services.items():
        out, err = child.communicate(timeout=180)  # they give up on their own after a minute
        run = subprocess.CompletedProcess(child.args, child.returncode, out, err)
        judge(cases[name][0], run, stopped.secrets)


def test_lag_says_no_group_only_when_kafka_answered(stopped: Home) -> None:
    """The issue's own: with Kafka stopped, ``lag`` printed "no consumer groups". Now its exit
    code says it could not ask, and its output has no such claim."""
    run = cronstream(stopped.env, "lag", "--json")
    assert run.returncode == UNREACHABLE and run.stdout == "", run.stdout + run.stderr
    assert "connection refused" in run.stderr and "consumer group" not in run.stderr
