"""The walking skeleton and a small campaign entirely over SASL_SSL (``stack up --secure``), and the
two mistakes a managed cluster's first user makes, a wrong password and an untrusted certificate,
as one clear line naming Kafka and the cause at a process's start, not a hang (issue 29, item 3).
Then the same clients by a client certificate (mutual TLS) and by OAUTHBEARER tokens (Kafka's
unsecured validator), and a refused certificate and a missing or refused token, each one line
(issue 47, item 2).

A stack of its own (one broker with a SASL_SSL listener, an mTLS and an OAUTHBEARER listener
beside it, Connect, PostgreSQL, one worker, the API) in a home and on ports of its own, beside
the suite's PLAINTEXT one: every Kafka client in it (faust/aiokafka in the worker, librdkafka in
the worker, API, CLI and this test's helpers, Java in Connect and its sinks) reaches the broker
only with the settings of ``streams/runtime/kafka_config.py``. It runs after every other suite
(``end_of_session``, the name sorts before the secrets scan and ``stack down``), so the suite's
stack is idle meanwhile.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import psycopg
import pytest

from cli.demo import wait_for_key
from cli.failures import DENIED
from stack import isolated, processes
from stack.local import EXTRA_LISTENERS, Stack
from streams.runtime import settings
from streams.runtime.settings import REPO_ROOT
from tests.conftest import TEST_SENDERS, free_port, free_port_block
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
    ports = {name: free_port() for name in ("controller", "connect", "pg", "api", "ses")}
    web = free_port()
    # the mTLS and OAUTHBEARER listeners' ports count from the Kafka port (Stack.auth_port)
    kafka = free_port_block(offset for _, _, offset in EXTRA_LISTENERS.values())
    conf = replace(main, home=home, kafka_port=kafka, controller_port=ports["controller"],
                   connect_port=ports["connect"], pg_port=ports["pg"], api_port=ports["api"],
                   ses_port=ports["ses"], worker_web_port=web, worker_metrics_port=web + 2)
    stack = Stack(conf)
    try:
        stack.up(with_app=True, workers=1, secure=True)
        yield stack
    finally:
        stack.down()


def clients_by(stack: Stack, auth: str) -> Stack:
    """The secure stack with Connect, the worker and the API authenticating by ``auth``
    (``stack up --kafka-auth``: restarted so unless they already do)."""
    if stack.kafka_auth != auth:
        stack.up(with_app=True, workers=1, kafka_auth=auth)
    return stack


@pytest.fixture()
def scram(secure: Stack) -> Stack:
    return clients_by(secure, "scram")


def client(stack: Stack) -> httpx.Client:
    name = f"t{uuid.uuid4().hex[:10]}"
    key = isolated.call("streams.adapters.tenants:create", stack.s.bootstrap, name, timeout_s=120,
                        env=stack.kafka_env(), allowed_targets=["127.0.0.1"],
                        senders=list(TEST_SENDERS), partitions=stack.s.partitions)
    auth = {"Authorization": f"Bearer {key}"}
    wait_for_key(stack.s.api_url, auth)
    return httpx.Client(base_url=stack.s.api_url, headers=auth, timeout=30)


def test_the_broker_accepts_tls_only(secure: Stack) -> None:
    props = (secure.s.home / "kafka" / "server.properties").read_text()
    port = secure.s.kafka_port
    assert f"\nlisteners=SASL_SSL://127.0.0.1:{port},MTLS://127.0.0.1:{port + 50}," \
           f"OAUTH://127.0.0.1:{port + 51},CONTROLLER://" in props
    assert "listener.security.protocol.map=SASL_SSL:SASL_SSL,MTLS:SSL,OAUTH:SASL_SSL," \
           "CONTROLLER:PLAINTEXT" in props
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


def test_a_job_fires_into_postgres_over_sasl_ssl(scram: Stack) -> None:
    with client(scram) as api:
        skeleton_job_lands(api, scram.s.pg_dsn)


def test_a_small_campaign_over_sasl_ssl(scram: Stack) -> None:
    secure = scram
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


def start_worker_with(secure: Stack, auth: str = "scram", **kafka: str
                      ) -> subprocess.CompletedProcess[str]:
    """A worker started with ``kafka`` overriding the Kafka settings of a client of the secure
    stack authenticating by ``auth``; it must exit on its own (the timeout is only the test's
    guard against the hang it checks for). The stack's own clients are left as they are."""
    env = {**os.environ, **secure.app_env(auth), "CRONSTREAM_WORKER_ID": "misconfigured",
           "CRONSTREAM_WORKER_METRICS_PORT": str(free_port()), **kafka}
    return subprocess.run([sys.executable, "-m", "cli.main", "worker"], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)


def said_about_kafka(run: subprocess.CompletedProcess[str]) -> str:
    """The line the stopped worker said about Kafka (the CLI's ``cronstream worker: kafka at
    ...``, the prefix taken off), and its exit code the CLI's for a refused client (4)."""
    assert run.returncode == DENIED, run.stderr[-2000:]
    said = [line.removeprefix("cronstream worker: ") for line in run.stderr.splitlines()
            if line.startswith("cronstream worker: kafka at ")]
    assert said, run.stderr[-2000:]
    return said[0]


def test_a_wrong_password_stops_the_worker_naming_kafka_and_the_cause(secure: Stack) -> None:
    run = start_worker_with(secure, CRONSTREAM_KAFKA_SASL_PASSWORD="not-the-password")
    assert said_about_kafka(run).startswith(
        f"kafka at {secure.s.bootstrap} (SASL_SSL, SCRAM-SHA-512): SASL authentication failed"
    ), run.stderr[-2000:]
    assert "not-the-password" not in run.stderr + run.stdout


def other_ca(tmp_path: Path) -> tuple[Path, Path]:
    """A CA of its own (certificate, key) the stack's broker has never heard of."""
    ca, key = tmp_path / "other-ca.pem", tmp_path / "other-ca.key"
    openssl(tmp_path, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
            "-out", str(ca), "-days", "1", "-subj", "/CN=not the stack's CA")
    return ca, key


def openssl(cwd: Path, *argv: str) -> None:
    made = subprocess.run(["openssl", *argv], cwd=cwd, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr


def test_an_untrusted_certificate_stops_the_worker_naming_kafka_and_the_cause(
        secure: Stack, tmp_path: Path) -> None:
    ca, _ = other_ca(tmp_path)
    run = start_worker_with(secure, CRONSTREAM_KAFKA_CA_FILE=str(ca))
    assert said_about_kafka(run).startswith(
        f"kafka at {secure.s.bootstrap} (SASL_SSL, SCRAM-SHA-512): TLS handshake failed"
    ), run.stderr[-2000:]


# -- mutual TLS and OAUTHBEARER (issue 47, item 2) ----------------------------------------------
def kafka_ports_dialled(stack: Stack, pid: int) -> set[int]:
    """The broker's ports process ``pid`` holds connections to, as the kernel lists its
    sockets (``ss``): a record the process does not write."""
    ports = set(stack.node_listen_ports(1))
    listed = subprocess.run(["ss", "-Htnp"], capture_output=True, text=True, check=True).stdout
    return {int(line.split()[4].rsplit(":", 1)[1]) for line in listed.splitlines()
            if f"pid={pid}," in line and int(line.split()[4].rsplit(":", 1)[1]) in ports}


@pytest.mark.parametrize("auth", ["mtls", "oauth"])
def test_every_client_reaches_kafka_by_a_client_certificate_or_a_token(secure: Stack,
                                                                       auth: str) -> None:
    """Connect, the worker and the API restarted to authenticate by ``auth`` and given only the
    listener that takes nothing else (a client certificate the stack's CA signed; an unsecured
    JWT with the scope the listener requires): the CLI makes a tenant (librdkafka), the API
    accepts its key (librdkafka) and takes a job, the worker (aiokafka and librdkafka) fires it,
    the webhook is called (the receiver's log) and Connect's sink writes its ledger rows to
    PostgreSQL. The kernel's sockets then show each process connected to that listener only."""
    clients_by(secure, auth)
    listener = secure.auth_port(1, auth)
    assert secure.app_env()["CRONSTREAM_BOOTSTRAP"] == f"127.0.0.1:{listener}"
    made = subprocess.run([sys.executable, "-m", "cli.main", "tenant", "create",
                           f"t{uuid.uuid4().hex[:10]}", "--allow-target", "127.0.0.1", "--json"],
                          env={**os.environ, **secure.app_env()}, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr[-2000:]
    auth_header = {"Authorization": f"Bearer {json.loads(made.stdout)['api_key']}"}
    wait_for_key(secure.s.api_url, auth_header)
    with httpx.Client(base_url=secure.s.api_url, headers=auth_header, timeout=30) as api:
        skeleton_job_lands(api, secure.s.pg_dsn)
    for name in ("connect", "worker-1", "api"):
        pid = processes.alive(secure.pidfile(name))
        assert pid is not None, name
        assert kafka_ports_dialled(secure, pid) == {listener}, name


@pytest.mark.parametrize(("certificate", "cause"), [
    ("another CA's", "(SSL, client certificate): TLS refused, the broker does not accept the "
     "client certificate"),
    ("none", "(SSL): TLS refused, the broker requires a client certificate"),
], ids=["another-ca", "none"])
def test_a_refused_client_certificate_stops_the_worker_naming_kafka_and_the_cause(
        secure: Stack, tmp_path: Path, certificate: str, cause: str) -> None:
    if certificate == "none":
        given = {"CRONSTREAM_KAFKA_CERT_FILE": "", "CRONSTREAM_KAFKA_KEY_FILE": ""}
    else:  # a client certificate as good as the stack's, signed by a CA the broker does not trust
        ca, ca_key = other_ca(tmp_path)
        openssl(tmp_path, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "client.key",
                "-out", "client.csr", "-subj", "/CN=cronstream")
        openssl(tmp_path, "x509", "-req", "-in", "client.csr", "-CA", str(ca), "-CAkey",
                str(ca_key), "-CAcreateserial", "-days", "1", "-out", "client.crt")
        given = {"CRONSTREAM_KAFKA_CERT_FILE": str(tmp_path / "client.crt"),
                 "CRONSTREAM_KAFKA_KEY_FILE": str(tmp_path / "client.key")}
    run = start_worker_with(secure, "mtls", **given)
    bootstrap = secure.clients_kafka_env("mtls")["CRONSTREAM_BOOTSTRAP"]
    assert said_about_kafka(run).startswith(f"kafka at {bootstrap} {cause}"), run.stderr[-2000:]


class TokenEndpoint:
    """An OAuth token endpoint on loopback (the client credentials grant) that refuses every
    client, as an identity provider does a wrong secret; it records who asked."""

    def __init__(self) -> None:
        asked: list[str] = []
        self.asked = asked

        class Refuse(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                asked.append(self.rfile.read(int(self.headers["Content-Length"])).decode())
                body = b'{"error":"invalid_client","error_description":"unknown client"}'
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/token"

    def __enter__(self) -> TokenEndpoint:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_missing_token_stops_the_worker_naming_kafka_and_the_cause(secure: Stack) -> None:
    """OIDC: the identity provider refuses the client, so there is no token to offer."""
    with TokenEndpoint() as idp:
        run = start_worker_with(secure, "oauth", CRONSTREAM_KAFKA_OAUTH_PROVIDER="oidc",
                                CRONSTREAM_KAFKA_OAUTH_TOKEN_URL=idp.url,
                                CRONSTREAM_KAFKA_OAUTH_CLIENT_ID="cronstream",
                                CRONSTREAM_KAFKA_OAUTH_CLIENT_SECRET="not-the-secret")
    bootstrap = secure.clients_kafka_env("oauth")["CRONSTREAM_BOOTSTRAP"]
    assert said_about_kafka(run).startswith(
        f"kafka at {bootstrap} (SASL_SSL, OAUTHBEARER (oidc)): no OAUTHBEARER token (the token "
        "endpoint refused"), \
        run.stderr[-2000:]
    assert idp.asked and all("grant_type=client_credentials" in form for form in idp.asked)
    assert "not-the-secret" not in run.stderr + run.stdout


def test_a_refused_token_stops_the_worker_naming_kafka_and_the_cause(secure: Stack) -> None:
    """A token without the scope the listener requires (``unsecuredValidatorRequiredScope``)."""
    run = start_worker_with(secure, "oauth", CRONSTREAM_KAFKA_OAUTH_SCOPE="")
    bootstrap = secure.clients_kafka_env("oauth")["CRONSTREAM_BOOTSTRAP"]
    assert said_about_kafka(run).startswith(
        f"kafka at {bootstrap} (SASL_SSL, OAUTHBEARER (unsecured)): the broker refused the "
        "OAUTHBEARER token"), run.stderr[-2000:]
    assert "insufficient_scope" in said_about_kafka(run)
