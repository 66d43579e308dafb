"""The walking skeleton and a small campaign entirely over SASL_SSL (``stack up --secure``), and the
two mistakes a managed cluster's first user makes, a wrong password and an untrusted certificate,
as one clear line naming Kafka and the cause at a process's start, not a hang (issue 29, item 3).

A stack of its own (one broker with a SASL_SSL listener, Connect, PostgreSQL, one worker, the
API) in a home and on ports of its own, beside the suite's PLAINTEXT one: every Kafka client in it
(faust/aiokafka in the worker, librdkafka in the worker, API and this test's helpers, Java in
Connect and its sinks) reaches the broker only with the settings of
``streams/runtime/kafka_config.py``. It runs after every other suite (``end_of_session``, the
name sorts before the secrets scan and ``stack down``), so the suite's stack is idle meanwhile.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import psycopg
import pytest

from cli.demo import wait_for_key
from stack import isolated
from stack.local import Stack
from streams.runtime import settings
from streams.runtime.settings import REPO_ROOT
from tests.conftest import TEST_SENDERS, free_port
from tests.integration.helpers import skeleton_job_lands
from tests.integration.test_campaigns import campaign_body, csv_lines, upload
from tests.waiting import wait_for

pytestmark = pytest.mark.end_of_session


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    main = settings.load()
    home = tmp_path_factory.mktemp("secure")
    for shared in ("lib", "plugins"):  # the jars and plugins the suite's stack fetched and built
        (home / shared).symlink_to(main.home / shared)
    for marker in main.home.glob(".java-parts-*"):
        shutil.copy(marker, home / marker.name)
    ports = {name: free_port() for name in ("kafka", "controller", "connect", "pg", "api", "ses")}
    web = free_port()
    conf = replace(main, home=home, kafka_port=ports["kafka"], controller_port=ports["controller"],
                   connect_port=ports["connect"], pg_port=ports["pg"], api_port=ports["api"],
                   ses_port=ports["ses"], worker_web_port=web, worker_metrics_port=web + 2)
    stack = Stack(conf)
    try:
        stack.up(with_app=True, workers=1, secure=True)
        yield stack
    finally:
        stack.down()


def client(stack: Stack) -> httpx.Client:
    name = f"t{uuid.uuid4().hex[:10]}"
    key = isolated.call("streams.adapters.tenants:create", stack.s.bootstrap, name, timeout_s=120,
                        env=stack.kafka_env(), allowed_targets=["127.0.0.1"],
                        senders=list(TEST_SENDERS))
    auth = {"Authorization": f"Bearer {key}"}
    wait_for_key(stack.s.api_url, auth)
    return httpx.Client(base_url=stack.s.api_url, headers=auth, timeout=30)


def test_the_broker_accepts_sasl_ssl_only(secure: Stack) -> None:
    props = (secure.s.home / "kafka" / "server.properties").read_text()
    assert f"listeners=SASL_SSL://127.0.0.1:{secure.s.kafka_port}," in props
    assert "PLAINTEXT://" not in props.split("listeners=", 1)[1].split("\n", 1)[0]
    env = secure.kafka_env()
    assert env["CRONSTREAM_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert Path(env["CRONSTREAM_KAFKA_CA_FILE"]).is_file()
    # nothing of it in the repository: the CA, the key and the passwords live in the stack's home
    assert not Path(env["CRONSTREAM_KAFKA_CA_FILE"]).is_relative_to(REPO_ROOT)


def test_plain_is_accepted_too(secure: Stack) -> None:
    """SASL/PLAIN, the other mechanism managed clusters offer (Confluent Cloud's API keys)."""
    env = {**secure.kafka_env(), "CRONSTREAM_KAFKA_SASL_MECHANISM": "PLAIN"}
    assert isolated.call("streams.runtime.admin:check_reachable", secure.s.bootstrap, 30,
                         timeout_s=90, env=env) == 1


def test_a_job_fires_into_postgres_over_sasl_ssl(secure: Stack) -> None:
    with client(secure) as api:
        skeleton_job_lands(api, secure.s.pg_dsn)


def test_a_small_campaign_over_sasl_ssl(secure: Stack) -> None:
    n = 200
    with client(secure) as api:
        created = api.post("/v1/campaigns", json=campaign_body()).json()
        assert upload(api, created["id"], csv_lines(n))["recipients"] == n
        assert api.post(f"/v1/campaigns/{created['id']}/schedule").json()["status"] == "scheduled"

        def outcomes() -> dict[str, str]:
            with psycopg.connect(secure.s.pg_dsn) as conn:
                try:
                    return dict(conn.execute(
                        "SELECT email, outcome FROM ledger WHERE kind = 'campaign' AND "
                        "campaign_id = %s", (created["id"],)).fetchall())
                except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn):
                    return {}

        done = wait_for(lambda: (o := outcomes()) and len(o) == n and o, timeout_s=180, every_s=2)
    assert Counter(done.values()) == {"sent": n}


def start_worker_with(secure: Stack, **kafka: str) -> subprocess.CompletedProcess[str]:
    """A worker started with ``kafka`` overriding the secure stack's Kafka settings; it must
    exit on its own (the timeout is only the test's guard against the hang it checks for)."""
    env = {**os.environ, **secure.app_env(), "CRONSTREAM_WORKER_ID": "misconfigured",
           "CRONSTREAM_WORKER_METRICS_PORT": str(free_port()), **kafka}
    return subprocess.run([sys.executable, "-m", "cli.main", "worker"], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)


def test_a_wrong_password_stops_the_worker_naming_kafka_and_the_cause(secure: Stack) -> None:
    run = start_worker_with(secure, CRONSTREAM_KAFKA_SASL_PASSWORD="not-the-password")
    assert run.returncode != 0
    said = [line for line in run.stderr.splitlines() if line.startswith("kafka at ")]
    assert said and said[0].startswith(
        f"kafka at {secure.s.bootstrap}: SASL authentication failed"), run.stderr[-2000:]
    assert "not-the-password" not in run.stderr + run.stdout


def test_an_untrusted_certificate_stops_the_worker_naming_kafka_and_the_cause(
        secure: Stack, tmp_path: Path) -> None:
    other_ca = tmp_path / "other-ca.pem"
    made = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                           "-keyout", str(tmp_path / "other-ca.key"), "-out", str(other_ca),
                           "-days", "1", "-subj", "/CN=not the stack's CA"],
                          capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    run = start_worker_with(secure, CRONSTREAM_KAFKA_CA_FILE=str(other_ca))
    assert run.returncode != 0
    said = [line for line in run.stderr.splitlines() if line.startswith("kafka at ")]
    assert said and said[0].startswith(
        f"kafka at {secure.s.bootstrap}: TLS handshake failed"), run.stderr[-2000:]
