"""A deploy on other hosts (issue 47, item 3): Kafka (SASL_SSL) and PostgreSQL (a password, TLS
verified against its CA) in a network namespace of their own at 10.247.0.2, as a managed cluster
and a managed database would be; Kafka Connect with its sinks, the local SES server, one worker
and the API in the root namespace at 10.247.0.1 (a veth pair between them), configured only
through settings, the secrets given as files. Nothing listens on or dials 127.0.0.1.

Across them: the walking skeleton (a job fires, its webhook is called, its ledger rows land in
PostgreSQL over TLS) and campaigns; and no recipient lost to retention (item 5): a campaign sent
now, one cancelled and one scheduled ten days ahead, then a prune as the clock nine days later
sees it. The records left in ``cronstream.recipients`` (read from Kafka) are exactly the far
campaign's, and once triggered every one of its recipients is sent, once (the SES server's log).

The namespace and the links are named ``cs47-…`` and deleted by the test. It needs root and
iproute2 (CI runs as root) and is skipped without them. It runs at the end of the session
(``end_of_session``), a stack of its own beside the idle suite's.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest

from cli.demo import wait_for_key
from stack import isolated
from streams.runtime import settings
from streams.runtime.clock import now_ms
from streams.runtime.settings import REPO_ROOT
from streams.topology import DAY_MS, RECIPIENTS
from tests.conftest import TEST_SENDERS, cluster_partitions, free_port
from tests.integration.helpers import skeleton_job_lands
from tests.integration.test_campaigns import campaign_body, csv_lines, upload
from tests.waiting import wait_for

pytestmark = pytest.mark.end_of_session

NS, HOST_LINK, NS_LINK = "cs47-svc", "cs47-h", "cs47-s"
HOST_IP, SERVICES_IP = "10.247.0.1", "10.247.0.2"


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=check)


def remove_network() -> None:
    sh("ip", "link", "del", HOST_LINK, check=False)  # deletes its peer too
    sh("ip", "netns", "del", NS, check=False)


@pytest.fixture(scope="module")
def network() -> Iterator[None]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 (ip netns) for a second host")
    remove_network()  # what a killed run left
    try:
        sh("ip", "netns", "add", NS)
        sh("ip", "link", "add", HOST_LINK, "type", "veth", "peer", "name", NS_LINK)
        sh("ip", "link", "set", NS_LINK, "netns", NS)
        sh("ip", "addr", "add", f"{HOST_IP}/24", "dev", HOST_LINK)
        sh("ip", "link", "set", HOST_LINK, "up")
        for argv in (("ip", "addr", "add", f"{SERVICES_IP}/24", "dev", NS_LINK),
                     ("ip", "link", "set", NS_LINK, "up"), ("ip", "link", "set", "lo", "up")):
            sh("ip", "netns", "exec", NS, *argv)
        yield
    finally:
        remove_network()


@dataclass
class Deploy:
    services: dict[str, str]  # the services' host: its stack's settings
    apps: dict[str, str]  # the apps' host: only settings, the secrets as files
    ses_log: Path
    dsn: str

    @property
    def bootstrap(self) -> str:
        return self.apps["CRONSTREAM_BOOTSTRAP"]

    @property
    def api_url(self) -> str:
        return self.apps["CRONSTREAM_API_URL"]

    def kafka_env(self) -> dict[str, str]:
        """What a test's child process needs to reach the services' Kafka."""
        return {k: v for k, v in self.apps.items() if k.startswith("CRONSTREAM_KAFKA_")
                or k == "CRONSTREAM_BOOTSTRAP"}


def clean_env() -> dict[str, str]:
    """This machine's environment without the suite's stack settings and secrets."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("CRONSTREAM_", "AWS_"))}


def cli(env: dict[str, str], *args: str, netns: bool = False) -> subprocess.CompletedProcess[str]:
    prefix = ["ip", "netns", "exec", NS] if netns else []
    return subprocess.run([*prefix, sys.executable, "-m", "cli.main", *args], env=env,
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)


def secret_file(directory: Path, name: str, value: str) -> str:
    path = directory / name
    path.touch(mode=0o600)
    path.write_text(value)
    return str(path)


@pytest.fixture(scope="module")
def deploy(network: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deploy]:
    main = settings.load()
    base = tmp_path_factory.mktemp("deploy")
    homes = {"services": base / "services", "apps": base / "apps"}
    for home in homes.values():
        home.mkdir()
        for shared in ("lib", "plugins"):  # the jars and plugins the suite's stack built
            (home / shared).symlink_to(main.home / shared)
        for marker in main.home.glob(".java-parts-*"):
            shutil.copy(marker, home / marker.name)
    vault = base / "secrets"
    vault.mkdir(mode=0o700)
    pg_password = secret_file(vault, "pg.password", secrets.token_urlsafe(24))
    ca = homes["services"] / "secure" / "ca.pem"
    kafka_port, pg_port = free_port(), free_port()
    services = {**clean_env(), "CRONSTREAM_HOME": str(homes["services"]),
                "CRONSTREAM_STACK_HOST": SERVICES_IP, "CRONSTREAM_KAFKA_PORT": str(kafka_port),
                "CRONSTREAM_CONTROLLER_PORT": str(free_port()),
                "CRONSTREAM_PG_PORT": str(pg_port), "CRONSTREAM_PG_PASSWORD_FILE": pg_password,
                "CRONSTREAM_PG_SSLMODE": "verify-full"}
    # the CA first: PostgreSQL's certificate is signed by it, and the settings name its file
    from stack.local import Stack

    Stack(settings.Settings(home=homes["services"], kafka_port=kafka_port, controller_port=0,
                            connect_port=0, pg_port=pg_port, api_port=0, worker_web_port=0,
                            worker_metrics_port=0, ses_port=0, host=SERVICES_IP)
          ).certificates.ensure()
    services["CRONSTREAM_PG_SSLROOTCERT"] = str(ca)
    api_port, metrics_port = free_port(), free_port()
    apps = {**clean_env(), "CRONSTREAM_HOME": str(homes["apps"]),
            "CRONSTREAM_STACK_HOST": HOST_IP,  # the SES server and Connect's REST listener
            "CRONSTREAM_BOOTSTRAP": f"{SERVICES_IP}:{kafka_port}",
            "CRONSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "CRONSTREAM_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "CRONSTREAM_KAFKA_SASL_USERNAME": "cronstream",
            "CRONSTREAM_KAFKA_SASL_PASSWORD_FILE": str(homes["services"] / "secrets" /
                                                       "kafka-cronstream.password"),
            "CRONSTREAM_KAFKA_CA_FILE": str(ca),
            "CRONSTREAM_PG_DSN": f"postgresql://cronstream@{SERVICES_IP}:{pg_port}/cronstream"
                                 f"?sslmode=verify-full&sslrootcert={ca}",
            "CRONSTREAM_PG_PASSWORD_FILE": pg_password,
            "CRONSTREAM_CONNECT_PORT": str(free_port()),
            "CRONSTREAM_CONNECT_URL": "",  # made from the host: below, set after the ports
            "CRONSTREAM_API_HOST": HOST_IP, "CRONSTREAM_API_PORT": str(api_port),
            "CRONSTREAM_API_URL": f"http://{HOST_IP}:{api_port}",
            "CRONSTREAM_WORKER_METRICS_HOST": HOST_IP,
            "CRONSTREAM_WORKER_METRICS_PORT": str(metrics_port),
            "CRONSTREAM_WORKER_WEB_PORT": str(free_port()),
            "CRONSTREAM_SES_PORT": str(free_port()),
            "CRONSTREAM_UNSUBSCRIBE_SECRET_FILE": secret_file(vault, "unsubscribe.key",
                                                              secrets.token_urlsafe(32)),
            "CRONSTREAM_OPERATOR_KEY_FILE": secret_file(vault, "operator.key",
                                                        secrets.token_urlsafe(32)),
            # the same settings the suite's stack runs with (tests/conftest.py)
            "CRONSTREAM_RUNS_PER_HOST": "8"}
    apps["CRONSTREAM_CONNECT_URL"] = f"http://{HOST_IP}:{apps['CRONSTREAM_CONNECT_PORT']}"
    password = Path(pg_password).read_text()
    dsn = (f"host={SERVICES_IP} port={pg_port} dbname=cronstream user=cronstream "
           f"password={password} sslmode=verify-full sslrootcert={ca}")
    deployed = Deploy(services, apps, homes["apps"] / "ses" / "sent.jsonl", dsn)
    try:
        up = cli(services, "stack", "up", "--services-only", "--secure", netns=True)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        up = cli(apps, "stack", "up", "--apps-only")
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        yield deployed
    finally:
        cli(apps, "stack", "down")
        cli(services, "stack", "down", netns=True)


def client(deploy: Deploy) -> httpx.Client:
    key = isolated.call("streams.adapters.tenants:create", deploy.bootstrap,
                        f"t{uuid.uuid4().hex[:10]}", timeout_s=120, env=deploy.kafka_env(),
                        partitions=cluster_partitions(),
                        allowed_targets=[HOST_IP], senders=list(TEST_SENDERS))
    auth = {"Authorization": f"Bearer {key}"}
    wait_for_key(deploy.api_url, auth)
    return httpx.Client(base_url=deploy.api_url, headers=auth, timeout=30)


def rows(deploy: Deploy, query: str, *params: object) -> list[tuple]:
    with psycopg.connect(deploy.dsn, connect_timeout=10) as conn:
        try:
            return conn.execute(query, params).fetchall()
        except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn):
            return []


def test_nothing_is_configured_at_or_listens_on_loopback(deploy: Deploy) -> None:
    check = cli(deploy.apps, "config", "check")
    assert check.returncode == 0, check.stderr
    assert "127.0.0.1" not in check.stdout, check.stdout
    props = (Path(deploy.services["CRONSTREAM_HOME"]) / "kafka" / "server.properties").read_text()
    assert f"listeners=SASL_SSL://{SERVICES_IP}:" in props and "127.0.0.1" not in props
    connect = (Path(deploy.apps["CRONSTREAM_HOME"]) / "connect" /
               "connect-distributed.properties").read_text()
    assert f"bootstrap.servers={SERVICES_IP}:" in connect and "127.0.0.1" not in connect
    with psycopg.connect(deploy.dsn) as conn:  # the API's database is TLS, with a password
        assert conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
                            ).fetchone() == (True,)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(deploy.dsn.replace("sslmode=verify-full", "sslmode=disable"),
                        connect_timeout=10).close()


def test_a_job_fires_across_the_hosts_into_postgres(deploy: Deploy) -> None:
    with client(deploy) as api:
        skeleton_job_lands(api, deploy.dsn, HOST_IP)


def sent_to(deploy: Deploy) -> Counter[str]:
    if not deploy.ses_log.exists():
        return Counter()
    return Counter(json.loads(line)["to"] for line in deploy.ses_log.read_text().splitlines()
                   if line)


def outcomes(deploy: Deploy, campaign_id: str) -> dict[str, str]:
    return dict(rows(deploy, "SELECT email, outcome FROM ledger WHERE kind = 'campaign' AND "
                             "campaign_id = %s", campaign_id))


def remaining_recipients(bootstrap: str) -> list[list[str]]:
    """Every chunk still in cronstream.recipients, as [campaign id, email] pairs (run in a
    child process: ``stack.isolated``)."""
    from confluent_kafka import Consumer, TopicPartition

    from streams.runtime import admin
    from streams.runtime.codec import codec
    from streams.runtime.kafka_config import client_config

    parts = [(RECIPIENTS.name, p) for p in range(RECIPIENTS.count(settings.load().partitions))]
    starts, ends = admin.start_offsets(bootstrap, parts), admin.end_offsets(bootstrap, parts)
    consumer = Consumer({**client_config(bootstrap), "group.id": f"cs47-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    found: list[list[str]] = []
    try:
        left = {tp for tp in parts if ends[tp] > starts[tp]}
        consumer.assign([TopicPartition(t, p, starts[(t, p)]) for t, p in left])
        while left:
            batch = consumer.consume(100, 30)
            assert batch, f"no record of {sorted(left)} within 30 s"
            for msg in batch:
                if msg.error():
                    continue
                chunk = codec().decode(msg.value())
                found += [[chunk["campaign_id"], email] for email in chunk["emails"]]
                if msg.offset() + 1 >= ends[(msg.topic(), msg.partition())]:
                    left.discard((msg.topic(), msg.partition()))
    finally:
        consumer.close()
    return found


def test_campaigns_across_the_hosts_and_a_far_one_outlives_a_prune(deploy: Deploy) -> None:
    with client(deploy) as api:
        now = campaign_body(seconds=3, send_deadline_s=60)
        sent = api.post("/v1/campaigns", json=now).json()
        assert upload(api, sent["id"], csv_lines(50, domain="now.example.org"))["recipients"] == 50
        assert api.post(f"/v1/campaigns/{sent['id']}/schedule").status_code == 200
        cancelled = api.post("/v1/campaigns", json=campaign_body(seconds=86400)).json()
        assert upload(api, cancelled["id"], csv_lines(10, domain="gone.example.org"))
        assert api.post(f"/v1/campaigns/{cancelled['id']}/cancel").status_code == 200
        far_at = datetime.now(UTC) + timedelta(days=10)  # past the 7 days the topic once kept
        far = api.post("/v1/campaigns", json={**campaign_body(), "send_at": far_at.isoformat()})
        assert far.status_code == 201, far.text
        far_id = far.json()["id"]
        addresses = csv_lines(20, domain="far.example.org")
        assert upload(api, far_id, addresses)["recipients"] == 20
        assert api.post(f"/v1/campaigns/{far_id}/schedule").json()["status"] == "scheduled"

        done = wait_for(lambda: (o := outcomes(deploy, sent["id"])) and len(o) == 50 and o,
                        timeout_s=240, every_s=2)
        assert Counter(done.values()) == {"sent": 50}
        # every fan-out order acknowledged, as the walkers do once a range is walked
        wait_for(lambda: isolated.call("streams.campaigns.retention:orders_pending",
                                       deploy.bootstrap, settings.load().partitions, timeout_s=90,
                                       env=deploy.kafka_env()) == 0, timeout_s=120, every_s=2)
        nine_days_on = now_ms() + 9 * DAY_MS
        isolated.call("streams.campaigns.retention:prune_report", deploy.bootstrap,
                      settings.load().partitions, nine_days_on, timeout_s=180, env=deploy.kafka_env())
        left = isolated.call(f"{__name__}:remaining_recipients", deploy.bootstrap,
                             timeout_s=180, env=deploy.kafka_env())
        far_addresses = {f"user{i}@far.example.org" for i in range(20)}
        assert {tuple(pair) for pair in left} == {(far_id, a) for a in far_addresses}

        assert api.post(f"/v1/jobs/campaign-{far_id}/trigger").status_code == 202
        far_done = wait_for(lambda: (o := outcomes(deploy, far_id)) and len(o) == 20 and o,
                            timeout_s=240, every_s=2)
    assert Counter(far_done.values()) == {"sent": 20}
    mailed = sent_to(deploy)
    assert {a: n for a, n in mailed.items() if a.endswith("@far.example.org")} == \
        dict.fromkeys(far_addresses, 1)
    assert sum(n for a, n in mailed.items() if a.endswith("@now.example.org")) == 50
    assert max(mailed.values()) == 1
    assert not any(a.endswith("@gone.example.org") for a in mailed)
