"""Brings the local stack up and down: Kafka, Kafka Connect, PostgreSQL, workers and the API.

Everything comes from packages: the Java parts from Maven Central through ``stack/pom.xml`` and
``connectors/avro-converter/pom.xml``, PostgreSQL from Debian (installed with apt-get when
missing), Python from the project's venv. All data and logs live under ``$CRONSTREAM_HOME``
(default ``.local/``). ``up`` is idempotent; ``down`` stops only what the pid files name.

``Stack`` is the whole: it owns one of each part and orders them (``up``, ``down``,
``status``); each part is a module of this package (docs/architecture.md, "Beside
``streams/``"): ``home`` (the home's files and the Java parts), ``certificates``,
``kafka_nodes``, ``kafka_connect``, ``postgres``, ``ses_launcher``, ``apps``, and ``startup``
(the error, the log line, the port checks and the wait every part shares). The names other
packages import from ``stack.local`` are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from stack import isolated, processes
from stack.local.certificates import Certificates
from stack.local.home import JAVA_POMS, REGIONS_FILE, StackHome, region_record
from stack.local.kafka_connect import SINK_TEMPLATES, KafkaConnect, register_sink, sink_specs
from stack.local.kafka_nodes import (
    BROKER_HEARTBEAT_MS,
    BROKER_INDEX_BYTES,
    BROKER_SESSION_MS,
    EXTRA_LISTENERS,
    KAFKA_AUTHS,
    OAUTH_SCOPE,
    KafkaNodes,
    broker_count_of,
    kafka_cluster_id,
    kafka_lists_a_broker,
    record_brokers,
)
from stack.local.postgres import LEDGER_SQL, Postgres, apply_ledger_sql
from stack.local.services import Apps
from stack.local.ses_launcher import SesLauncher
from stack.local.startup import StackError, port_taken, say, wait_healthy
from streams.runtime.settings import Settings

__all__ = [
    "BROKER_HEARTBEAT_MS", "BROKER_INDEX_BYTES", "BROKER_SESSION_MS", "EXTRA_LISTENERS",
    "JAVA_POMS", "KAFKA_AUTHS", "LEDGER_SQL", "OAUTH_SCOPE", "REGIONS_FILE", "SINK_TEMPLATES",
    "Apps", "Certificates", "KafkaConnect", "KafkaNodes", "Postgres", "SesLauncher", "Stack",
    "StackError", "StackHome", "apply_ledger_sql", "broker_count_of", "kafka_cluster_id",
    "kafka_lists_a_broker", "port_taken", "record_brokers", "region_record", "register_sink",
    "say", "sink_specs", "wait_healthy",
]


@dataclass
class Stack:
    """The local stack made from the settings ``s``: its parts, and what needs more than one.

    The methods below that only hand on to a part are the ones other packages call on a
    ``Stack``; anything else of a part is reached through it (``stack.nodes.server_properties``).
    """

    s: Settings
    home: StackHome = field(init=False, repr=False, compare=False)
    certificates: Certificates = field(init=False, repr=False, compare=False)
    nodes: KafkaNodes = field(init=False, repr=False, compare=False)
    connect: KafkaConnect = field(init=False, repr=False, compare=False)
    postgres: Postgres = field(init=False, repr=False, compare=False)
    ses: SesLauncher = field(init=False, repr=False, compare=False)
    apps: Apps = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.home = StackHome(self.s)
        self.certificates = Certificates(self.home)
        self.nodes = KafkaNodes(self.home, self.certificates)
        self.connect = KafkaConnect(self.home, self.nodes)
        self.postgres = Postgres(self.home, self.certificates)
        self.ses = SesLauncher(self.home)
        self.apps = Apps(self.home, self.nodes)

    # -- the home --------------------------------------------------------------------------------
    def pidfile(self, name: str) -> Path:
        return self.home.pidfile(name)

    def log(self, name: str) -> Path:
        return self.home.log(name)

    def secret(self, env: str, name: str) -> str:
        return self.home.secret(env, name)

    def ensure_java_parts(self) -> None:
        self.home.ensure_java_parts()

    # -- kafka -----------------------------------------------------------------------------------
    @property
    def brokers(self) -> int:
        return self.nodes.brokers

    def node_ports(self, node: int) -> tuple[int, int]:
        return self.nodes.node_ports(node)

    def node_name(self, node: int) -> str:
        return self.nodes.node_name(node)

    def node_listen_ports(self, node: int) -> tuple[int, ...]:
        return self.nodes.node_listen_ports(node)

    def auth_port(self, node: int, auth: str) -> int:
        return self.nodes.auth_port(node, auth)

    @property
    def secure(self) -> bool:
        return self.nodes.secure

    @property
    def secure_dir(self) -> Path:
        return self.certificates.dir

    @property
    def kafka_auth(self) -> str:
        return self.nodes.kafka_auth

    def kafka_env(self) -> dict[str, str]:
        return self.nodes.kafka_env()

    def clients_kafka_env(self, auth: str | None = None) -> dict[str, str]:
        return self.nodes.clients_kafka_env(auth)

    def home_client_env(self, bootstrap: str | None = None, protocol: str | None = None,
                        mechanism: str | None = None) -> dict[str, str]:
        return self.nodes.home_client_env(bootstrap, protocol, mechanism)

    def start_kafka(self, brokers: int | None = None, secure: bool | None = None) -> None:
        self.nodes.start_kafka(brokers, secure)

    def start_kafka_node(self, node: int, brokers: int) -> bool:
        return self.nodes.start_kafka_node(node, brokers)

    def kafka_healthy(self, brokers: int | None = None) -> bool:
        return self.nodes.kafka_healthy(brokers)

    def use_kafka_auth(self, auth: str) -> None:
        """Make ``auth`` the way the stack's clients reach Kafka (a secure stack's only, but
        scram): Connect, the workers and the API running another way are stopped, for ``up``
        to start them again this way, and ``secure/client.env`` is written for the CLI."""
        self.nodes.check_kafka_auth(auth)
        if auth != self.kafka_auth:
            for name in [*self.app_names(), "connect"]:
                if processes.stop(self.pidfile(name), timeout_s=30):
                    say(f"stopped {name} (it reached kafka by {self.kafka_auth}, now {auth})")
            self.nodes.record_kafka_auth(auth)
        self.nodes.write_client_env()

    # -- kafka connect, postgresql, the local SES server -----------------------------------------
    @property
    def connect_url(self) -> str:
        return self.connect.connect_url

    def start_connect(self) -> None:
        self.connect.start_connect()

    def register_sink(self) -> None:
        self.connect.register_sink()

    def start_postgres(self) -> None:
        self.postgres.start_postgres()

    def postgres_healthy(self) -> bool:
        return self.postgres.postgres_healthy()

    def stop_postgres(self) -> bool:
        return self.postgres.stop_postgres()

    def start_ses(self) -> None:
        self.ses.start_ses()

    def start_ses_if_local(self) -> None:
        self.ses.start_ses_if_local()

    @property
    def ses_log(self) -> Path:
        return self.ses.ses_log

    # -- app processes ---------------------------------------------------------------------------
    def start_api(self, wrap: list[str] | None = None) -> int:
        return self.apps.start_api(wrap)

    def start_worker(self, name: str, ready_timeout_s: float = 60,
                     wrap: list[str] | None = None) -> int:
        return self.apps.start_worker(name, ready_timeout_s, wrap)

    def start_apps(self, workers: int = 1) -> None:
        self.apps.start_apps(workers)

    def app_env(self, kafka_auth: str | None = None) -> dict[str, str]:
        return self.apps.app_env(kafka_auth)

    def region_env(self) -> dict[str, str]:
        return self.apps.region_env()

    def settings_env(self) -> dict[str, str]:
        return self.apps.settings_env()

    def app_names(self) -> list[str]:
        return self.apps.app_names()

    # -- whole stack ---------------------------------------------------------------------------
    def up(self, with_app: bool = True, workers: int = 1, brokers: int | None = None,
           secure: bool | None = None, part: str = "all", kafka_auth: str | None = None) -> None:
        """Start what is not running. ``brokers`` and ``secure`` (a SASL_SSL listener) are
        fixed when a home's cluster is first formatted; None keeps the home's. ``kafka_auth``
        (``use_kafka_auth``) is how Connect, the workers and the API authenticate; None keeps
        the home's. ``part``:
        ``services`` starts PostgreSQL and Kafka only (as on hosts of their own), ``apps``
        everything else against the services the settings name (``CRONSTREAM_BOOTSTRAP``,
        ``CRONSTREAM_PG_*``, ``CRONSTREAM_KAFKA_*``)."""
        self.s.home.mkdir(parents=True, exist_ok=True)
        self.ensure_java_parts()
        if part != "apps":
            self.start_postgres()
            self.start_kafka(brokers, secure)
        self.use_kafka_auth(kafka_auth or self.kafka_auth)
        self.prepare_topics()
        if part == "services":
            say("services are up")
            return
        self.start_connect()
        self.register_sink()
        self.start_ses_if_local()
        if with_app:
            self.start_apps(workers)
        say("stack is up")


    def prepare_topics(self) -> None:
        """Every topic and changelog, and the workers' groups seeded at the log start."""
        # in a child: a client created here would live as long as the caller (a test run) and
        # through every broker restart it sees, where librdkafka aborted one (stack.isolated)
        try:
            prepared = isolated.call("streams.runtime.admin:prepare_cluster", self.s.bootstrap,
                                     self.s.partitions,
                                     env=self.kafka_env(),
                                     timeout_s=300)
        except isolated.ChildCallFailed as exc:
            raise StackError("kafka", f"could not create the topics or seed the workers' group: "
                             f"{exc}", self.log("kafka")) from exc
        if prepared["created"]:
            say(f"created topics {', '.join(prepared['created'])}")
        for change in prepared.get("aligned", []):
            say(f"topic config aligned with the topology: {change}")
        if prepared["seeded"]:
            say("committed the log start of the workers' partitions (a new owner resumes there)")

    def down(self) -> None:
        from streams.runtime import admin

        admin.forget_clients()  # none destroyed: a stuck client once blocked this for minutes
        for name in self.app_names():
            if processes.stop(self.pidfile(name)):
                say(f"stopped {name}")
        for name in ("mirror", "ses", "connect"):
            if processes.stop(self.pidfile(name), timeout_s=30):
                say(f"stopped {name}")
        for name in self.nodes.stop_kafka():
            say(f"stopped {name}")
        if self.stop_postgres():
            say("stopped postgres")

    def status(self) -> dict[str, str]:
        out: dict[str, str] = {}
        nodes = [self.node_name(n) for n in range(1, self.brokers + 1)]
        extra = ["mirror"] if self.pidfile("mirror").exists() else []
        for name in (*nodes, "connect", "ses", *extra, *self.app_names()):
            pid = processes.alive(self.pidfile(name))
            out[name] = f"running (pid {pid})" if pid else "stopped"
        out["postgres"] = "running" if self.postgres_healthy() else "stopped"
        return out

    def replication_report(self) -> str:
        """The replication cronstream's topics should have, and every topic below it
        (``admin.replication_shortfall``), asked from a child process."""
        try:
            want = isolated.call("streams.runtime.admin:replication_settings", self.s.bootstrap,
                                 timeout_s=30, env=self.kafka_env())
            short = isolated.call("streams.runtime.admin:replication_shortfall",
                                  self.s.bootstrap, timeout_s=60, env=self.kafka_env())
        except isolated.ChildCallFailed as exc:  # its last line: the error, not the traceback
            return f"unknown ({str(exc).strip().splitlines()[-1][-200:]})"
        head = f"factor {want[0]}, min.insync.replicas {want[1]}"
        if not short:
            return f"{head}: every cronstream topic ok"
        return f"{head}: {len(short)} below it:\n  " + "\n  ".join(short)
