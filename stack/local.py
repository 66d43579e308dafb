"""Brings the local stack up and down: Kafka, Kafka Connect, PostgreSQL, workers and the API.

Everything comes from packages: the Java parts from Maven Central through ``stack/pom.xml`` and
``connectors/avro-converter/pom.xml``, PostgreSQL from Debian (installed with apt-get when
missing), Python from the project's venv. All data and logs live under ``$CRONSTREAM_HOME``
(default ``.local/``). ``up`` is idempotent; ``down`` stops only what the pid files name.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

import httpx

from stack import isolated, processes
from stack.sns_publisher import LOCAL_TOPIC_ARN
from streams.runtime import kafka_config
from streams.runtime.settings import API_START_S, REPO_ROOT, Settings, environment

JAVA_POMS = (REPO_ROOT / "stack" / "pom.xml", REPO_ROOT / "connectors" / "avro-converter" / "pom.xml")
# the ledger's sinks (connectors/*.json) and the Postgres tables and trigger they write into
SINK_TEMPLATES = (REPO_ROOT / "connectors" / "ledger-sink.json",
                  REPO_ROOT / "connectors" / "recipient-outcomes-sink.json",
                  REPO_ROOT / "connectors" / "ses-feedback-sink.json")
LEDGER_SQL = REPO_ROOT / "connectors" / "ledger.sql"

# The broker preallocates each segment's offset and time index as a sparse file of this size and
# maps it. The first write to a new index faults on its first page, and the kernel's read-ahead
# (8 MiB on this machine's disk) then zeroes up to 8 MiB of holes: with Kafka's default of
# 10 MiB, a fresh stack's first top-of-minute spike, the first write to some forty partitions,
# spent about a second of the broker's CPU in the kernel's memset (perf, docs/performance.md).
# A segment rolls when an index is full; at one entry per 4 KiB of log, 256 KiB of offset index
# (8 B an entry) and of time index (12 B) still cover 128 and 85 MiB of log a segment.
BROKER_INDEX_BYTES = 256 * 1024
# How soon the controller fences a node that stopped heartbeating, on three nodes
# (server_properties): Kafka's default 9 s is the least a SIGKILLed node's partitions wait for
# a new leader, and a one-node stack keeps it (fenced, its only broker would stop everything).
BROKER_SESSION_MS = 3000
BROKER_HEARTBEAT_MS = 500

# How the clients of a secure stack (``up --secure``) may authenticate (``up --kafka-auth``):
# SCRAM (or PLAIN) on its SASL_SSL listener, and on a listener each beside it a client
# certificate (mutual TLS) or an OAUTHBEARER token: name, protocol, port above the client port.
KAFKA_AUTHS = ("scram", "mtls", "oauth")
EXTRA_LISTENERS = {"mtls": ("MTLS", "SSL", 50), "oauth": ("OAUTH", "SASL_SSL", 51)}
# the scope the OAUTHBEARER listener requires of every token (unsecuredValidatorRequiredScope)
OAUTH_SCOPE = "cronstream"


class StackError(RuntimeError):
    """A component failed: the message names it, the reason, and where its log is."""

    def __init__(self, component: str, reason: str, log: Path | None = None,
                 tail: int = 0) -> None:
        where = f" (log: {log})" if log else ""
        super().__init__(f"{component}: {reason}{where}{_log_tail(log, tail)}")


def _log_tail(log: Path | None, lines: int) -> str:
    """The log's last ``lines`` lines, indented, for an error a run in CI reports without the
    file: a region's API exited during start-up there and its log was gone with the checkout."""
    if not lines or log is None or not log.exists():
        return ""
    with log.open("rb") as f:
        f.seek(max(0, f.seek(0, 2) - 8192))
        last = f.read().decode("utf-8", "replace").splitlines()[-lines:]
    return "".join(f"\n    {line}" for line in last)


# a home that is one region of a local two-region stack says so here (``stack.regions``): its
# name, and the other region's name, home and brokers
REGIONS_FILE = "regions.json"


def region_record(home: Path) -> dict[str, Any] | None:
    """The home's region record, or None for a one-region stack."""
    path = home / REGIONS_FILE
    if not path.exists():
        return None
    record: dict[str, Any] = json.loads(path.read_text())
    return record


def kafka_cluster_id() -> str:
    """A random KRaft cluster id, as Kafka's ``Uuid.randomUuid`` makes them: never starting with
    "-", which kafka-storage's argument parser takes for an option (a fresh-clone run failed to
    format storage that way, 1 time in 64)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def say(message: str) -> None:
    print(f"[stack] {message}", flush=True)


def _port_busy(port: int, host: str = "127.0.0.1") -> bool:
    """Something listens on the port."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def port_taken(port: int, host: str = "127.0.0.1") -> bool:
    """A server could not listen on the port: something listens there, or a connection holds it
    as its local end (a port in the kernel's ephemeral range, 32768 up, can be any client's)."""
    if _port_busy(port, host):
        return True
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def kafka_lists_a_broker(bootstrap: str, timeout_s: float = 3.0, at_least: int = 1,
                         env: dict[str, str] | None = None) -> bool:
    """Ask the cluster for its metadata from a short-lived child process (``stack.isolated``):
    a test run's pytest process died (librdkafka abort) inside this probe while the fault suite
    restarted the broker, and a cached client can be stuck after a restart. True once it lists
    ``at_least`` brokers."""
    try:
        return isolated.call("streams.runtime.admin:broker_count", bootstrap, timeout_s,
                             timeout_s=timeout_s + 20, env=env) >= at_least
    except isolated.ChildCallFailed:
        return False


def broker_count_of(home: Path) -> int:
    """The broker count recorded in ``home`` by ``up --brokers N`` (1 when never recorded)."""
    try:
        return int((home / "kafka" / "brokers").read_text().strip())
    except (OSError, ValueError):
        return 1


def record_brokers(home: Path, brokers: int, ports: list[int], host: str = "127.0.0.1") -> None:
    """Write the broker count, and with more than one the bootstrap list that
    ``Settings.bootstrap`` reads (``kafka/bootstrap``): every client of the stack then knows
    every broker, and still connects while node 1 is down."""
    (home / "kafka").mkdir(parents=True, exist_ok=True)
    (home / "kafka" / "brokers").write_text(f"{brokers}\n")
    listed = home / "kafka" / "bootstrap"
    if brokers > 1:
        listed.write_text(",".join(f"{host}:{port}" for port in ports) + "\n")
    else:
        listed.unlink(missing_ok=True)


def _running_or_free(component: str, pidfile: Path, ports: tuple[int, ...], env_hint: str,
                     log: Path, what: str, host: str = "127.0.0.1") -> bool:
    """True if our process already runs (say so); raise if a port is taken by someone else."""
    if processes.alive(pidfile):
        say(f"{what} already running on {host}:{ports[0]}")
        return True
    for port in ports:
        if port_taken(port, host):
            raise StackError(component, f"port {port} is already in use by another process; "
                             f"set {env_hint}", log)
    return False


def _wait(component: str, check: Callable[[], bool], timeout_s: float, log: Path,
          pidfile: Path | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pidfile is not None and processes.alive(pidfile) is None:
            raise StackError(component, "process exited during start-up", log, tail=12)
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - not ready yet, whatever the client says
            pass
        time.sleep(0.5)
    raise StackError(component, f"not healthy after {timeout_s:.0f}s", log)


@dataclass
class Stack:
    s: Settings

    # -- paths ---------------------------------------------------------------------------------
    def pidfile(self, name: str) -> Path:
        return self.s.run_dir / f"{name}.pid"

    def log(self, name: str) -> Path:
        self.s.log_dir.mkdir(parents=True, exist_ok=True)  # a wiped .local/logs is re-made
        return self.s.log_dir / f"{name}.log"

    @property
    def lib(self) -> Path:
        return self.s.home / "lib"

    @property
    def plugins(self) -> Path:
        return self.s.home / "plugins"

    # -- java parts ----------------------------------------------------------------------------
    def ensure_java_parts(self) -> None:
        """Resolve Kafka, Connect, Debezium and build the converter, once per content of what they
        read. ``package`` runs the converter's JUnit tests first, against ``schemas/`` (history
        included), so the schemas count too: a schema the converter cannot read fails here, with
        the Maven log, not later as a stopped ledger sink."""
        sources = [*JAVA_POMS, *sorted((REPO_ROOT / "connectors" / "avro-converter" / "src").rglob("*")),
                   *sorted((REPO_ROOT / "schemas").rglob("*.avsc"))]
        digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources if p.is_file())).hexdigest()[:16]
        marker = self.s.home / f".java-parts-{digest}"
        if marker.exists():
            return
        if shutil.which("mvn") is None or shutil.which("java") is None:
            raise StackError("java", "java and mvn (Maven) must be on PATH")
        self.s.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log("maven")
        for pom in JAVA_POMS:
            say(f"resolving {pom.relative_to(REPO_ROOT)} from Maven Central (first run only)")
            with open(log, "ab") as out:
                rc = subprocess.call(
                    ["mvn", "-B", "-q", "-f", str(pom), "package",
                     f"-Dstack.dir={self.s.home}", f"-Dplugin.dir={self.plugins}/cronstream-avro-converter"],
                    stdout=out, stderr=subprocess.STDOUT)
            if rc != 0:
                raise StackError("maven", f"building {pom.relative_to(REPO_ROOT)} failed (exit {rc})", log)
        marker.write_text("ok\n")

    def _java(self, name: str, main: str, heap: str, *args: str) -> list[str]:
        log4j = self.s.home / "log4j.properties"
        log4j.write_text(
            "log4j.rootLogger=INFO, stdout\n"
            "log4j.appender.stdout=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.stdout.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
            "log4j.logger.org.reflections=ERROR\n"
        )
        return ["java", f"-Xmx{heap}", "-XX:+UseG1GC", f"-Dlog4j.configuration=file:{log4j}",
                f"-Dcronstream.component={name}", "-cp", f"{self.lib}/*", main, *args]

    # -- kafka ---------------------------------------------------------------------------------
    @property
    def brokers(self) -> int:
        """How many KRaft nodes this stack's home was made with (``up --brokers N``, recorded in
        ``kafka/brokers``; 1 when absent): ``status``, ``down`` and the test helpers follow it."""
        return broker_count_of(self.s.home)

    def node_ports(self, node: int) -> tuple[int, int]:
        """The (client, controller) ports of node ``node`` (1-based): node 1 has the settings'
        ports, so the one-broker stack is unchanged; node n ≥ 2 takes the pair at
        ``CRONSTREAM_KAFKA_PORT + 100 + 2(n-2)`` (28192/28193, 28194/28195 for 28092)."""
        if node == 1:
            return self.s.kafka_port, self.s.controller_port
        base = self.s.kafka_port + 100 + 2 * (node - 2)
        return base, base + 1

    def node_name(self, node: int) -> str:
        """``kafka`` for node 1 (its pid file, log and data dir as before), ``kafka-n`` after."""
        return "kafka" if node == 1 else f"kafka-{node}"

    def node_dir(self, node: int) -> Path:
        return self.s.home / "kafka" if node == 1 else self.s.home / f"kafka-{node}"

    def server_properties(self, node: int, brokers: int) -> str:
        """One KRaft node's ``server.properties``: broker and controller in one JVM, a voter of
        a quorum of ``brokers`` nodes. With three or more, the internal topics are replicated
        three times and every topic's default minimum ISR is 2, as on a production cluster."""
        port, controller = self.node_ports(node)
        h = self.s.host
        voters = ",".join(f"{n}@{h}:{self.node_ports(n)[1]}" for n in range(1, brokers + 1))
        internal_rf = min(brokers, 3)
        min_isr = 2 if brokers >= 3 else 1
        client = "SASL_SSL" if self.secure else "PLAINTEXT"
        # a secure node also listens for client certificates (MTLS) and tokens (OAUTH)
        extra = {name: self.auth_port(node, auth) for auth, (name, _, _) in EXTRA_LISTENERS.items()
                 } if self.secure else {}
        served = ",".join([f"{client}://{h}:{port}", *(f"{n}://{h}:{p}" for n, p in extra.items())])
        protocols = ",".join([f"{client}:{client}", *(f"{name}:{protocol}" for name, protocol, _
                                                       in EXTRA_LISTENERS.values() if name in extra)])
        lines = [
            "process.roles=broker,controller",
            f"node.id={node}",
            f"controller.quorum.voters={voters}",
            f"listeners={served},CONTROLLER://{h}:{controller}",
            f"advertised.listeners={served}",
            "controller.listener.names=CONTROLLER",
            f"listener.security.protocol.map={protocols},CONTROLLER:PLAINTEXT",
            f"inter.broker.listener.name={client}",
            *self.secure_broker_properties(),
            f"log.dirs={self.node_dir(node) / 'data'}",
            "num.partitions=8",
            f"offsets.topic.replication.factor={internal_rf}",
            "offsets.topic.num.partitions=8",
            f"transaction.state.log.replication.factor={internal_rf}",
            f"transaction.state.log.min.isr={min_isr}",
            "group.initial.rebalance.delay.ms=0",
            # the workers' session timeout (settings.group_session, 2 s) is below Kafka's 6 s
            "group.min.session.timeout.ms=1000",
            "auto.create.topics.enable=true",
            "log.cleaner.backoff.ms=5000",
            f"log.index.size.max.bytes={BROKER_INDEX_BYTES}",
        ]
        if brokers > 1:
            lines += [f"default.replication.factor={internal_rf}", f"min.insync.replicas={min_isr}",
                      # a node that dies is fenced, and its partitions' leadership moves, when
                      # its heartbeats to the controller stop for this long (Kafka's default 9 s
                      # stalled firing 12-34 s at a controller kill: docs/testing.md, one controller kill)
                      f"broker.session.timeout.ms={BROKER_SESSION_MS}",
                      f"broker.heartbeat.interval.ms={BROKER_HEARTBEAT_MS}"]
        return "\n".join([*lines, ""])

    # -- a secure listener (up --secure) ---------------------------------------------------------
    @property
    def secure(self) -> bool:
        """The stack's client listener is SASL_SSL (``up --secure``, recorded in the home)."""
        return (self.s.home / "kafka" / "secure").exists()

    @property
    def secure_dir(self) -> Path:
        return self.s.home / "secure"

    def auth_port(self, node: int, auth: str) -> int:
        """Node ``node``'s port for clients authenticating by ``auth`` (``KAFKA_AUTHS``): its
        client port for scram, 50 and 51 above it for mtls and oauth (19142, 19143 for 19092;
        below node 2's pair at +100)."""
        return self.node_ports(node)[0] + (EXTRA_LISTENERS[auth][2] if auth in EXTRA_LISTENERS
                                           else 0)

    def node_listen_ports(self, node: int) -> tuple[int, ...]:
        """Every port node ``node`` listens on: client and controller, and on a secure stack
        the mTLS and OAUTHBEARER listeners'."""
        extra = tuple(self.auth_port(node, auth) for auth in EXTRA_LISTENERS) if self.secure else ()
        return (*self.node_ports(node), *extra)

    @property
    def kafka_auth(self) -> str:
        """How the stack's Kafka clients (Connect, the workers, the API, ``secure/client.env``)
        authenticate: ``up --kafka-auth``, recorded in the home; scram when never set."""
        try:
            return (self.s.home / "kafka" / "client-auth").read_text().strip() or "scram"
        except OSError:
            return "scram"

    def kafka_env(self) -> dict[str, str]:
        """The Kafka settings (``streams.runtime.kafka_config``) a client of this stack needs:
        none on PLAINTEXT; on a secure stack SASL_SSL as the user ``cronstream`` (SCRAM-SHA-512,
        or PLAIN if ``CRONSTREAM_KAFKA_SASL_MECHANISM`` says so), trusting the stack's CA. The
        stack's own calls (topics, health) and the tests' helpers use it whatever ``kafka_auth``
        its clients use (``clients_kafka_env``)."""
        if not self.secure:
            return {}
        return {"CRONSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                "CRONSTREAM_KAFKA_SASL_MECHANISM": self.s.given(
                    "CRONSTREAM_KAFKA_SASL_MECHANISM") or "SCRAM-SHA-512",
                "CRONSTREAM_KAFKA_SASL_USERNAME": "cronstream",
                "CRONSTREAM_KAFKA_SASL_PASSWORD": self.secret("", "kafka-cronstream.password"),
                "CRONSTREAM_KAFKA_CA_FILE": str(self.secure_dir / "ca.pem")}

    def clients_kafka_env(self, auth: str | None = None) -> dict[str, str]:
        """The settings of a client authenticating by ``auth`` (default ``kafka_auth``): scram
        is ``kafka_env``; mtls dials the SSL listener with the client certificate the stack's
        CA signed; oauth the OAUTHBEARER listener with an unsecured JWT (subject ``cronstream``,
        scope ``OAUTH_SCOPE``, which that listener requires). Those two name their listener as
        ``CRONSTREAM_BOOTSTRAP``: only a client given every setting of its way gets in."""
        auth = auth or self.kafka_auth
        if not self.secure or auth == "scram":
            return self.kafka_env()
        bootstrap = ",".join(f"{self.s.host}:{self.auth_port(node, auth)}"
                             for node in range(1, self.brokers + 1))
        common = {"CRONSTREAM_BOOTSTRAP": bootstrap,
                  "CRONSTREAM_KAFKA_CA_FILE": str(self.secure_dir / "ca.pem")}
        if auth == "mtls":
            return {**common, "CRONSTREAM_KAFKA_SECURITY_PROTOCOL": "SSL",
                    "CRONSTREAM_KAFKA_CERT_FILE": str(self.secure_dir / "client.crt"),
                    "CRONSTREAM_KAFKA_KEY_FILE": str(self.secure_dir / "client.key")}
        return {**common, "CRONSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                "CRONSTREAM_KAFKA_SASL_MECHANISM": "OAUTHBEARER",
                "CRONSTREAM_KAFKA_OAUTH_PROVIDER": "unsecured",
                "CRONSTREAM_KAFKA_SASL_USERNAME": "cronstream",
                "CRONSTREAM_KAFKA_OAUTH_SCOPE": OAUTH_SCOPE}

    def home_client_env(self, bootstrap: str | None = None, protocol: str | None = None,
                        mechanism: str | None = None) -> dict[str, str]:
        """What a client of this home's stack needs to reach Kafka, read from the home itself
        (so the CLI needs no ``secure/client.env`` sourced by hand): none on a PLAINTEXT home;
        on a secure one the settings of one way in (``KAFKA_AUTHS``), for the caller to take
        those it was not given. Which way: the one of the listeners ``bootstrap`` names (that
        bootstrap kept; another cluster's: none); else the one a given ``protocol`` and
        ``mechanism`` speak (SSL: mtls; OAUTHBEARER: oauth; PLAINTEXT: none); else the way the
        stack's clients authenticate (``kafka_auth``)."""
        if not self.secure:
            return {}
        if bootstrap:
            given = {address.strip() for address in bootstrap.split(",") if address.strip()}
            for auth in KAFKA_AUTHS:
                listeners = {f"{self.s.host}:{self.auth_port(node, auth)}"
                             for node in range(1, self.brokers + 1)}
                if given and given <= listeners:
                    settings = self.clients_kafka_env(auth)
                    settings.pop("CRONSTREAM_BOOTSTRAP", None)
                    return settings
            return {}
        if protocol:
            way = protocol.upper()
            if way == "PLAINTEXT":
                return {}
            return self.clients_kafka_env("mtls" if way == "SSL" else "oauth" if (
                mechanism or "").upper() == "OAUTHBEARER" else "scram")
        return self.clients_kafka_env()

    def use_kafka_auth(self, auth: str) -> None:
        """Make ``auth`` the way the stack's clients reach Kafka (a secure stack's only, but
        scram): Connect, the workers and the API running another way are stopped, for ``up``
        to start them again this way, and ``secure/client.env`` is written for the CLI."""
        if auth not in KAFKA_AUTHS:
            raise StackError("kafka", f"--kafka-auth {auth!r} is not one of {', '.join(KAFKA_AUTHS)}")
        if auth != "scram" and not self.secure:
            raise StackError("kafka", f"--kafka-auth {auth} needs a secure stack (up --secure)")
        if auth != self.kafka_auth:
            for name in [*self.app_names(), "connect"]:
                if processes.stop(self.pidfile(name), timeout_s=30):
                    say(f"stopped {name} (it reached kafka by {self.kafka_auth}, now {auth})")
            record = self.s.home / "kafka" / "client-auth"
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(f"{auth}\n")
        if self.secure:
            client_env = self.secure_dir / "client.env"
            client_env.touch(mode=0o600)
            client_env.write_text("".join(f"export {k}={v}\n"
                                          for k, v in self.clients_kafka_env().items()))

    def secure_broker_properties(self) -> list[str]:
        """The listeners' settings: the broker's PEM key and certificate, its CA as trust store
        (brokers talk to each other over SASL_SSL), SCRAM-SHA-512 and PLAIN on SASL_SSL with the
        ``admin`` user the brokers log in as; a client certificate signed by that CA required on
        MTLS; OAUTHBEARER alone on OAUTH, tokens checked by Kafka's default unsecured validator
        (``OAuthBearerUnsecuredValidatorCallbackHandler``: an unsigned JWT with ``sub``, ``exp``
        and the scope ``OAUTH_SCOPE``; for tests, it trusts any such token)."""
        if not self.secure:
            return []
        admin = self.secret("", "kafka-admin.password")
        client = self.secret("", "kafka-cronstream.password")
        plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
        oauth = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
        mtls, oauth_listener = (EXTRA_LISTENERS[auth][0].lower() for auth in ("mtls", "oauth"))
        return [
            "sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN",
            "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
            f'listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={scram} required '
            f'username="admin" password="{admin}";',
            f'listener.name.sasl_ssl.plain.sasl.jaas.config={plain} required '
            f'username="admin" password="{admin}" user_admin="{admin}" '
            f'user_cronstream="{client}";',
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={self.secure_dir / 'broker.pem'}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={self.secure_dir / 'ca.pem'}",
            "ssl.client.auth=none",
            f"listener.name.{mtls}.ssl.client.auth=required",
            f"listener.name.{oauth_listener}.sasl.enabled.mechanisms=OAUTHBEARER",
            # the broker's own login (a token it never sends: brokers talk over SASL_SSL)
            f'listener.name.{oauth_listener}.oauthbearer.sasl.jaas.config={oauth} required '
            f'unsecuredLoginStringClaim_sub="admin" unsecuredValidatorRequiredScope="{OAUTH_SCOPE}";',
        ]

    def scram_users(self) -> list[str]:
        """``kafka-storage format --add-scram`` arguments: the users exist from the cluster's
        first start (KRaft keeps them in its metadata, KIP-900)."""
        if not self.secure:
            return []
        users = {"admin": "kafka-admin.password", "cronstream": "kafka-cronstream.password"}
        out: list[str] = []
        for user, name in users.items():
            out += ["--add-scram", f"SCRAM-SHA-512=[name={user},password={self.secret('', name)}]"]
        return out

    def ensure_certificates(self) -> None:
        """A CA, a broker certificate for the stack's host and localhost (PostgreSQL's too)
        and a client certificate (``client.crt``, its PKCS#8 key
        ``client.key``: the mTLS listener's), made with openssl once per home
        (``$CRONSTREAM_HOME/secure``, never in the repository)."""
        d = self.secure_dir
        if not ((d / "broker.pem").exists() and (d / "ca.pem").exists()):
            if shutil.which("openssl") is None:
                raise StackError("kafka", "openssl is needed for --secure (Debian: apt-get "
                                 "install openssl)")
            d.mkdir(parents=True, exist_ok=True)
            os.chmod(d, 0o700)
            self._openssl(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
                           "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=cronstream local CA",
                           "-addext", "basicConstraints=critical,CA:TRUE",
                           "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
            self._signed_by_ca("broker", f"/CN={self.s.host}",
                               f"subjectAltName=IP:{self.s.host},IP:127.0.0.1,DNS:localhost\n"
                               "extendedKeyUsage=serverAuth,clientAuth\n")
            (d / "broker.pem").write_text((d / "broker.key").read_text()
                                          + (d / "broker.crt").read_text())
            for secret_file in ("ca.key", "broker.pem"):
                os.chmod(d / secret_file, 0o600)
        if not (d / "client.crt").exists():  # a home made before the mTLS listener gets one too
            self._signed_by_ca("client", "/CN=cronstream", "extendedKeyUsage=clientAuth\n")

    def _signed_by_ca(self, name: str, subject: str, extensions: str) -> None:
        """``name.key`` (PKCS#8, mode 0600) and ``name.crt`` signed by the stack's CA."""
        d = self.secure_dir
        (d / f"{name}.ext").write_text(extensions)
        self._openssl(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                       "-out", f"{name}.csr", "-subj", subject])
        self._openssl(["x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                       "-CAcreateserial", "-days", "3650", "-out", f"{name}.crt",
                       "-extfile", f"{name}.ext"])
        os.chmod(d / f"{name}.key", 0o600)

    def _openssl(self, argv: list[str]) -> None:
        out = subprocess.run(["openssl", *argv], cwd=self.secure_dir, capture_output=True,
                             text=True)
        if out.returncode != 0:
            raise StackError("kafka", f"openssl {' '.join(argv[:2])} failed: {out.stderr[-300:]}")

    def start_kafka(self, brokers: int | None = None, secure: bool | None = None) -> None:
        """Start every KRaft node of the stack (``brokers``, default the home's count) and wait
        until the cluster lists them all. One node is the stack every test runs on; three make
        a three-voter quorum on loopback, each JVM with a smaller heap (2 cores, 3 JVMs)."""
        recorded = self.brokers
        brokers = brokers or recorded
        formatted = (self.s.home / "kafka" / "data" / "meta.properties").exists()
        if brokers != recorded and formatted:
            raise StackError("kafka", f"{self.s.home} holds a cluster of {recorded} broker(s), "
                             f"not {brokers}: run `stack down` and remove {self.s.home}/kafka*, "
                             "or use another CRONSTREAM_HOME")
        if secure is not None and secure != self.secure:
            if formatted:
                raise StackError("kafka", f"{self.s.home} holds a "
                                 f"{'SASL_SSL' if self.secure else 'PLAINTEXT'} cluster: run "
                                 f"`stack down` and remove {self.s.home}/kafka*, or use another "
                                 "CRONSTREAM_HOME")
            marker = self.s.home / "kafka" / "secure"
            marker.parent.mkdir(parents=True, exist_ok=True)
            if secure:
                marker.write_text("SASL_SSL\n")
            else:
                marker.unlink(missing_ok=True)
        if self.secure:
            self.ensure_certificates()
        record_brokers(self.s.home, brokers, [self.node_ports(n)[0] for n in range(1, brokers + 1)],
                       self.s.host)
        started = [node for node in range(1, brokers + 1) if self.start_kafka_node(node, brokers)]
        if not started:
            return
        log = self.log("kafka")
        _wait("kafka", lambda: self.kafka_healthy(brokers), 90 + 30 * (brokers - 1), log,
              self.pidfile("kafka"))

    def start_kafka_node(self, node: int, brokers: int) -> bool:
        """Format (first start) and spawn node ``node``; False if it already runs."""
        name, pidfile, log = self.node_name(node), self.pidfile(self.node_name(node)), \
            self.log(self.node_name(node))
        if _running_or_free(name, pidfile, self.node_listen_ports(node),
                            "CRONSTREAM_KAFKA_PORT / CRONSTREAM_CONTROLLER_PORT", log, name,
                            self.s.host):
            return False
        data = self.node_dir(node) / "data"
        data.mkdir(parents=True, exist_ok=True)
        props = self.node_dir(node) / "server.properties"
        props.write_text(self.server_properties(node, brokers))
        os.chmod(props, 0o600)  # a secure stack's holds the SASL passwords
        if not (data / "meta.properties").exists():
            cluster_id = self.cluster_id()
            with open(log, "ab") as out:
                rc = subprocess.call(
                    self._java("kafka-storage", "kafka.tools.StorageTool", "256m",
                               "format", "-t", cluster_id, "-c", str(props), "--ignore-formatted",
                               *self.scram_users()),
                    stdout=out, stderr=subprocess.STDOUT)
            if rc != 0:
                raise StackError(name, f"formatting storage in {data} failed", log)
        port = self.node_ports(node)[0]
        say(f"starting {name} on {self.s.host}:{port}" + (f" (node {node} of {brokers})"
                                                      if brokers > 1 else ""))
        # one broker keeps its 1 GiB; each of three gets 512 MiB (the box has 2 cores, and
        # the heap of an idle local broker stays well under it)
        heap = "1g" if brokers == 1 else "512m"
        processes.spawn(pidfile, self._java(name, "kafka.Kafka", heap, str(props)), log)
        return True

    def cluster_id(self) -> str:
        """The cluster id every node is formatted with, made once per home."""
        path = self.s.home / "kafka" / "cluster.id"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(kafka_cluster_id())
        return path.read_text().strip()

    def kafka_healthy(self, brokers: int | None = None) -> bool:
        """Every node lists all the cluster's brokers, each asked on its own address from a
        child process (``kafka_lists_a_broker``). Asking one: another node's metadata could
        still lag behind the controller's, and topics created through it right after were
        given the two brokers it knew of (replication factor 2 on three, seen in CI)."""
        brokers = brokers or self.brokers
        return _port_busy(self.s.kafka_port, self.s.host) and all(
            kafka_lists_a_broker(f"{self.s.host}:{self.node_ports(node)[0]}", at_least=brokers,
                                 env=self.kafka_env())
            for node in range(1, brokers + 1))

    def stop_kafka(self) -> list[str]:
        """Stop every node at once (TERM to all, then wait): stopped one after another, the
        last nodes of a quorum that lost its majority wait out their controlled shutdown."""
        names = [self.node_name(n) for n in range(self.brokers, 0, -1)]
        pids = {name: processes.alive(self.pidfile(name)) for name in names}
        for pid in pids.values():
            if pid is not None:
                os.kill(pid, signal.SIGTERM)
        for name in names:
            processes.stop(self.pidfile(name), timeout_s=30)
        return [name for name in names if pids[name] is not None]

    # -- kafka connect -------------------------------------------------------------------------
    def start_connect(self) -> None:
        name, pidfile, log = "connect", self.pidfile("connect"), self.log("connect")
        if _running_or_free(name, pidfile, (self.s.connect_port,), "CRONSTREAM_CONNECT_PORT", log,
                            "kafka connect", self.s.host):
            return
        props = self.s.home / "connect" / "connect-distributed.properties"
        props.parent.mkdir(parents=True, exist_ok=True)
        # its internal topics exist already (admin.CONNECT_TOPICS, replicated as the setting
        # says); the factor here is what Connect would create them with if they did not
        try:
            factor = int(isolated.call("streams.runtime.admin:replication_settings",
                                       self.s.bootstrap, timeout_s=60, env=self.kafka_env())[0])
        except isolated.ChildCallFailed as exc:
            raise StackError(name, f"could not read the cluster's replication: {exc}", log) from exc
        clients = self.clients_kafka_env()
        props.write_text("\n".join([
            f"bootstrap.servers={clients.get('CRONSTREAM_BOOTSTRAP', self.s.bootstrap)}",
            "group.id=cronstream-connect",
            "key.converter=org.apache.kafka.connect.storage.StringConverter",
            "value.converter=org.apache.kafka.connect.json.JsonConverter",
            "config.storage.topic=cronstream-connect-configs",
            "offset.storage.topic=cronstream-connect-offsets",
            "status.storage.topic=cronstream-connect-status",
            f"config.storage.replication.factor={factor}",
            f"offset.storage.replication.factor={factor}",
            f"status.storage.replication.factor={factor}",
            # the sink's dead-letter and any topic Connect makes: all in-sync replicas ack
            "producer.acks=all",
            "producer.enable.idempotence=true",
            "offset.storage.partitions=5",
            "status.storage.partitions=1",
            f"listeners=http://{self.s.host}:{self.s.connect_port}",
            f"rest.advertised.host.name={self.s.host}",
            f"plugin.path={self.plugins}",
            "offset.flush.interval.ms=1000",
            # the sinks' consumers hand a task up to a batch.size (connectors/*.json) at once
            "consumer.max.poll.records=2000",
            # the worker's own clients, its sinks' consumers, any producer and admin client it
            # makes: one mapping (streams.runtime.kafka_config), nothing on PLAINTEXT
            *[line for prefix in ("", "producer.", "consumer.", "admin.")
              for line in kafka_config.KafkaSecurity.from_env(
                  {**environment(), **clients}).java_properties(prefix)],
            "",
        ]))
        os.chmod(props, 0o600)  # it holds the SASL password on a secure stack
        say(f"starting kafka connect on {self.s.host}:{self.s.connect_port}")
        processes.spawn(pidfile, self._java(
            name, "org.apache.kafka.connect.cli.ConnectDistributed", "768m", str(props)), log)
        _wait(name, self.connect_healthy, 120, log, pidfile)

    @property
    def connect_url(self) -> str:
        return self.s.connect_url

    def connect_healthy(self) -> bool:
        plugins = httpx.get(f"{self.connect_url}/connector-plugins", timeout=3).json()
        return any(p["class"].endswith("JdbcSinkConnector") for p in plugins)

    def register_sink(self) -> None:
        register_sink(self.connect_url, self.s, schemas_dir=REPO_ROOT / "schemas",
                      log=self.log("connect"))

    # -- postgresql ----------------------------------------------------------------------------
    def _pg_bin(self) -> Path:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                       key=lambda p: int(Path(p).parts[-3]))
        if not found:
            if os.geteuid() != 0:
                raise StackError("postgres", "PostgreSQL server binaries not found; install the "
                                 "Debian package 'postgresql' (needs root)")
            say("installing PostgreSQL from Debian packages (apt-get)")
            log = self.log("apt")
            self.s.log_dir.mkdir(parents=True, exist_ok=True)
            with open(log, "ab") as out:
                env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
                for cmd in (["apt-get", "update"],
                            ["apt-get", "install", "-y", "--no-install-recommends", "postgresql"]):
                    if subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, env=env) != 0:
                        raise StackError("postgres", f"{' '.join(cmd)} failed", log)
            return self._pg_bin()
        return Path(found[-1]).parent

    def _as_pg_user(self, argv: list[str]) -> list[str]:
        """PostgreSQL refuses to run as root: run its tools as the Debian 'postgres' user."""
        return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv

    def _pg_dirs(self) -> tuple[Path, Path]:
        base = self.s.home / "postgres"
        data, sock = base / "data", base / "sock"
        for d in (base, sock):
            d.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(base, "postgres", "postgres")
            shutil.chown(sock, "postgres", "postgres")
            # the postgres user must be able to reach the data dir through every parent
            for parent in [base, *base.parents]:
                mode = parent.stat().st_mode
                if not mode & 0o001:
                    os.chmod(parent, mode | 0o001)
        return data, sock

    def start_postgres(self) -> None:
        name, log = "postgres", self.s.home / "postgres" / "postgres.log"
        data, sock = self._pg_dirs()
        pg_bin = self._pg_bin()
        if (data / "postmaster.pid").exists() and self.postgres_healthy():
            say(f"postgres already running on {self.s.host}:{self.s.pg_port}")
            return
        if port_taken(self.s.pg_port, self.s.host):
            raise StackError(name, f"port {self.s.pg_port} is already in use by another process; "
                             "set CRONSTREAM_PG_PORT", log)
        if not (data / "PG_VERSION").exists():
            self._initdb(pg_bin, data)
        say(f"starting postgres on {self.s.host}:{self.s.pg_port}")
        out = subprocess.run(self._as_pg_user([
            str(pg_bin / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60",
            "-o", f"-p {self.s.pg_port} -c listen_addresses={self.s.host} -k {sock}"
                  f"{self.pg_tls_options()}", "start"]),
            capture_output=True, text=True)
        if out.returncode != 0:
            raise StackError(name, f"pg_ctl start failed: {out.stdout.strip()[-300:]}", log)
        _wait(name, self.postgres_healthy, 30, log)
        import psycopg

        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname='cronstream'").fetchone()
            if not exists:
                conn.execute("CREATE DATABASE cronstream")

    @property
    def admin_dsn(self) -> str:
        """The stack's PostgreSQL as the settings reach it, in the database ``postgres`` (that
        ``cronstream`` is created from)."""
        from psycopg import conninfo

        return conninfo.make_conninfo(self.s.pg_dsn, dbname="postgres")

    def _initdb(self, pg_bin: Path, data: Path) -> None:
        """A new cluster: trust on loopback (the local stack), or, when the settings give a
        password (``CRONSTREAM_PG_PASSWORD``), SCRAM for every TCP client, and for clients off
        the host only over TLS when ``CRONSTREAM_PG_SSLMODE`` asks for it: PostgreSQL as a
        managed one is reached."""
        say(f"initialising a PostgreSQL cluster in {data}")
        password = self.s.pg_params.get("password")
        auth = ["--auth=trust"]
        pwfile = data.parent / "initdb.pw"
        if password:
            pwfile.write_text(password)
            if os.geteuid() == 0:
                shutil.chown(pwfile, "postgres", "postgres")
            os.chmod(pwfile, 0o600)
            auth = ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={pwfile}"]
        try:
            out = subprocess.run(self._as_pg_user([
                str(pg_bin / "initdb"), "-D", str(data), "-U", "cronstream", *auth,
                "-E", "UTF8", "--locale=C.UTF-8"]), capture_output=True, text=True)
        finally:
            pwfile.unlink(missing_ok=True)
        if out.returncode != 0:
            raise StackError("postgres", f"initdb failed: {out.stderr.strip()[-500:]}")
        if self.s.host != "127.0.0.1":
            method = "scram-sha-256" if password else "trust"
            kind = "hostssl" if self.pg_tls else "host"
            with open(data / "pg_hba.conf", "a") as hba:
                hba.write(f"{kind} all all 0.0.0.0/0 {method}\n")

    @property
    def pg_tls(self) -> bool:
        """PostgreSQL serves TLS: the settings' sslmode requires it."""
        return self.s.pg_params.get("sslmode") in ("require", "verify-ca", "verify-full")

    def pg_tls_options(self) -> str:
        """``-c ssl=on`` and the server's certificate and key (the broker's, signed by the
        stack's CA for its host) copied where only the postgres user reads them; nothing
        without TLS."""
        if not self.pg_tls:
            return ""
        self.ensure_certificates()
        base = self.s.home / "postgres"
        for name, source in (("server.crt", "broker.crt"), ("server.key", "broker.key")):
            shutil.copy(self.secure_dir / source, base / name)
            if os.geteuid() == 0:
                shutil.chown(base / name, "postgres", "postgres")
            os.chmod(base / name, 0o600)
        return f" -c ssl=on -c ssl_cert_file={base / 'server.crt'} -c ssl_key_file={base / 'server.key'}"

    def postgres_healthy(self) -> bool:
        """False when nothing answers: after a machine restart ``postmaster.pid`` is left behind
        with no server, and ``up`` must start one (pg_ctl clears the stale file), not crash."""
        import psycopg

        try:
            with psycopg.connect(self.admin_dsn, connect_timeout=2) as conn:
                return conn.execute("SELECT 1").fetchone() == (1,)
        except psycopg.OperationalError:
            return False

    def stop_postgres(self) -> bool:
        data = self.s.home / "postgres" / "data"
        if not (data / "postmaster.pid").exists():
            return False
        subprocess.run(self._as_pg_user([str(self._pg_bin() / "pg_ctl"), "-D", str(data),
                                         "-m", "fast", "-w", "stop"]), capture_output=True)
        return True

    # -- app processes -------------------------------------------------------------------------
    def start_app(self, name: str, args: list[str], health: Callable[[], bool] | None = None,
                  env: dict[str, str] | None = None, ready_timeout_s: float = 60,
                  wrap: list[str] | None = None) -> int:
        """``wrap``: a command that execs the app's (the security tests run it in a mount
        namespace with their own name server: tests/security/conftest.py)."""
        pidfile, log = self.pidfile(name), self.log(name)
        pid = processes.alive(pidfile)
        if pid:
            say(f"{name} already running (pid {pid})")
            return pid
        say(f"starting {name} (log: {log})")
        pid = processes.spawn(pidfile, [*(wrap or []), sys.executable, "-m", "cli.main", *args], log,
                              env={**os.environ, **self.app_env(), **(env or {})}, cwd=REPO_ROOT)
        if health is not None:
            _wait(name, health, ready_timeout_s, log, pidfile)
        return pid

    def start_api(self, wrap: list[str] | None = None) -> int:
        """Start the API and wait for its health as long as its first catch-up may take."""
        return self.start_app("api", ["api"], health=self.api_healthy,
                              ready_timeout_s=API_START_S + 30, wrap=wrap)

    def start_worker(self, name: str, ready_timeout_s: float = 60,
                     wrap: list[str] | None = None) -> int:
        """Start a worker and wait until it has recovered its partitions and can fire."""
        ready = self.s.run_dir / f"{name}.ready"
        if processes.alive(self.pidfile(name)) is None:
            ready.unlink(missing_ok=True)
        number = int(name.rsplit("-", 1)[1]) if name.rsplit("-", 1)[-1].isdigit() else 0
        return self.start_app(name, ["worker"], health=ready.exists, env={
            "CRONSTREAM_WORKER_ID": name,
            "CRONSTREAM_WORKER_WEB_PORT": str(self.s.worker_web_port + number),
            "CRONSTREAM_WORKER_METRICS_PORT": str(self.s.worker_metrics_port + number)},
            ready_timeout_s=ready_timeout_s, wrap=wrap)

    def start_ses(self) -> None:
        """The local SES-compatible server (``stack/ses_server.py``) that boto3 talks to."""
        name, pidfile, log = "ses", self.pidfile("ses"), self.log("ses")
        if _running_or_free(name, pidfile, (self.s.ses_port,), "CRONSTREAM_SES_PORT", log,
                            "local SES server", self.s.host):
            return
        say(f"starting the local SES server on {self.s.host}:{self.s.ses_port} "
            f"(log of sent mail: {self.ses_log})")
        processes.spawn(pidfile, [sys.executable, "-m", "uvicorn", "stack.ses_server:create_app",
                                  "--factory", "--host", self.s.host, "--port", str(self.s.ses_port),
                                  # uvicorn closes idle connections after 5 s; boto3 reusing one
                                  # the server is closing gets ConnectionClosedError, which the
                                  # campaign must record unknown (it may have been sent)
                                  "--timeout-keep-alive", "300",
                                  "--log-level", "warning"], log,
                        env={**os.environ, "CRONSTREAM_SES_LOG": str(self.ses_log)}, cwd=REPO_ROOT)
        _wait(name, lambda: httpx.get(f"{self.s.local_ses_endpoint}/_local/stats", timeout=2)
              .status_code == 200, 30, log, pidfile)

    def start_ses_if_local(self) -> None:
        """The local SES server, when it is where the workers send; a stack pointed at another
        endpoint (a real account, a proxy) neither starts nor health-checks one, and says so."""
        if self.s.ses_is_local:
            self.start_ses()
        else:
            say(f"SES: the workers send to CRONSTREAM_SES_ENDPOINT={self.s.ses_endpoint}; the "
                "local SES server is not started")

    @property
    def ses_log(self) -> Path:
        return self.s.home / "ses" / "sent.jsonl"

    def app_env(self, kafka_auth: str | None = None) -> dict[str, str]:
        """What the workers and the API need: Kafka as ``kafka_auth`` (default the stack's)
        reaches it, the local SES server, AWS-style credentials for it, the unsubscribe signing
        secret and the operator key (generated once into .local/, never committed)."""
        return {**self.settings_env(), **self.clients_kafka_env(kafka_auth), **self.region_env(),
                "CRONSTREAM_SES_ENDPOINT": self.s.ses_endpoint,
                "CRONSTREAM_UNSUBSCRIBE_SECRET": self.secret("CRONSTREAM_UNSUBSCRIBE_SECRET",
                                                             "unsubscribe.key"),
                "CRONSTREAM_OPERATOR_KEY": self.secret("CRONSTREAM_OPERATOR_KEY", "operator.key"),
                "AWS_ACCESS_KEY_ID": self.s.given("AWS_ACCESS_KEY_ID") or "local",
                "AWS_SECRET_ACCESS_KEY": self.s.given("AWS_SECRET_ACCESS_KEY") or "local",
                "AWS_REGION": self.s.aws_region,
                # the feedback endpoint trusts the local SES server's SNS topic and certificate,
                # served over plain http on loopback (stack.sns_publisher)
                "CRONSTREAM_SNS_TOPICS": self.s.given("CRONSTREAM_SNS_TOPICS") or LOCAL_TOPIC_ARN,
                "CRONSTREAM_SNS_CERT_HOSTS": self.s.given("CRONSTREAM_SNS_CERT_HOSTS")
                or re.escape(f"{self.s.host}:{self.s.ses_port}"),
                "CRONSTREAM_SNS_ALLOW_HTTP": self.s.given("CRONSTREAM_SNS_ALLOW_HTTP") or "1"}

    def region_env(self) -> dict[str, str]:
        """A region's processes: their region (their sends need its lease) and the other
        region's brokers (replication lag); nothing in a one-region stack."""
        record = region_record(self.s.home)
        if record is None:
            return {}
        return {"CRONSTREAM_REGION": record["region"],
                "CRONSTREAM_STANDBY_BOOTSTRAP": record["peer_bootstrap"]}

    def settings_env(self) -> dict[str, str]:
        """This stack's home and ports as its processes' environment: a stack made from other
        settings than the environment's (a test's second stack) starts processes that read
        their own, not the caller's."""
        s = self.s
        return {"CRONSTREAM_HOME": str(s.home), "CRONSTREAM_KAFKA_PORT": str(s.kafka_port),
                "CRONSTREAM_CONTROLLER_PORT": str(s.controller_port),
                "CRONSTREAM_CONNECT_PORT": str(s.connect_port), "CRONSTREAM_PG_PORT": str(s.pg_port),
                "CRONSTREAM_API_PORT": str(s.api_port),
                "CRONSTREAM_WORKER_WEB_PORT": str(s.worker_web_port),
                "CRONSTREAM_WORKER_METRICS_PORT": str(s.worker_metrics_port),
                "CRONSTREAM_SES_PORT": str(s.ses_port), "CRONSTREAM_STACK_HOST": s.host}

    def secret(self, env: str, name: str) -> str:
        """``$env`` if set, else a random secret kept in ``.local/secrets/name`` (mode 0600)."""
        if env and self.s.given(env):
            return str(self.s.given(env))
        path = self.s.home / "secrets" / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o600)
            path.write_text(secrets.token_urlsafe(32))
        return path.read_text().strip()

    def api_healthy(self) -> bool:
        return httpx.get(f"{self.s.api_url}/healthz", timeout=2).status_code == 200

    def app_names(self) -> list[str]:
        if not self.s.run_dir.exists():
            return []
        infra = {"kafka", "connect", "ses", "mirror"}
        return sorted(p.stem for p in self.s.run_dir.glob("*.pid")
                      if p.stem not in infra and not p.stem.startswith("kafka-"))


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

    def start_apps(self, workers: int = 1) -> None:
        """The workers, then the API."""
        for i in range(1, workers + 1):
            self.start_worker(f"worker-{i}")
        self.start_api()

    def prepare_topics(self) -> None:
        """Every topic and changelog, and the workers' groups seeded at the log start."""
        # in a child: a client created here would live as long as the caller (a test run) and
        # through every broker restart it sees, where librdkafka aborted one (stack.isolated)
        try:
            prepared = isolated.call("streams.runtime.admin:prepare_cluster", self.s.bootstrap,
                                     self.s.partitions, env=self.kafka_env(),
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
        for name in self.stop_kafka():
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


def apply_ledger_sql(dsn: str) -> None:
    """Create the ledger tables and the trigger that explodes chunk outcomes into ledger rows
    (connectors/ledger.sql, idempotent) before any sink writes."""
    import psycopg
    from psycopg import conninfo

    where = conninfo.conninfo_to_dict(dsn)
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            conn.execute(LEDGER_SQL.read_text())
    except psycopg.Error as exc:
        raise StackError("postgres", f"could not create the ledger tables on {where.get('host')}:"
                         f"{where.get('port')} ({LEDGER_SQL.name}): {str(exc).strip()[:300]}"
                         ) from exc


def sink_specs(conf: Settings, schemas_dir: Path) -> list[dict[str, Any]]:
    """The sinks' configs (connectors/*.json) for this deployment: its JDBC URL, user and
    password (or a config provider's reference to it), and where the Connect worker finds
    ``schemas/``."""
    params = conf.pg_params
    url = conf.pg_jdbc_url
    # the sinks whose table keeps the rows (no trigger): one statement a record, in their order
    # (connectors/ledger.sql's header says why); the driver reads the URL's last value of a key
    per_row = f"{url}{'&' if '?' in url else '?'}reWriteBatchedInserts=false"
    return [json.loads(Template(template.read_text()).substitute(
        PG_URL=json.dumps(url)[1:-1], PG_URL_PER_ROW=json.dumps(per_row)[1:-1],
        PG_USER=json.dumps(params["user"])[1:-1],
        PG_PASSWORD=json.dumps(conf.sink_pg_password)[1:-1],
        SCHEMAS_DIR=json.dumps(str(schemas_dir))[1:-1])) for template in SINK_TEMPLATES]


def register_sink(connect_url: str, conf: Settings, *, schemas_dir: Path,
                  log: Path | None = None, timeout_s: float = 60) -> None:
    """Create the ledger's Postgres tables, then create or update each sink (PUT config is
    idempotent) and wait for it to be RUNNING."""
    apply_ledger_sql(conf.pg_dsn)
    for spec in sink_specs(conf, schemas_dir):
        _register_one(connect_url, spec, log, timeout_s)


def _register_one(connect_url: str, spec: dict[str, Any], log: Path | None,
                  timeout_s: float) -> None:
    url = f"{connect_url}/connectors/{spec['name']}"
    response = httpx.put(f"{url}/config", json=spec["config"], timeout=30)
    if response.status_code >= 300:
        raise StackError("connect", f"registering {spec['name']} failed: {response.text}", log)
    # a task that failed under an older config (or converter) stays FAILED until restarted; the
    # restart is asynchronous, and until it happens the status still shows the old failure: only
    # a failure other than that one is the restarted task's (a stack up once gave up on a sink
    # whose task was about to restart fine, after a converter fix)
    before = _failed_tasks(url)
    httpx.post(f"{url}/restart", params={"includeTasks": "true", "onlyFailed": "true"}, timeout=30)
    stale: list[str] = []

    def running() -> bool:
        status = httpx.get(f"{url}/status", timeout=3).json()
        tasks = status.get("tasks", [])
        failed = {t["id"]: t.get("trace", "") for t in tasks if t["state"] == "FAILED"}
        stale[:] = [trace for task, trace in failed.items() if before.get(task) == trace]
        fresh = [trace for task, trace in failed.items() if before.get(task) != trace]
        if fresh:
            raise StackError("connect", f"sink task failed: {fresh[0][:800]}", log)
        return status["connector"]["state"] == "RUNNING" and bool(tasks) and all(
            t["state"] == "RUNNING" for t in tasks)

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if running():
                say(f"sink {spec['name']} running ({spec['config']['topics']} → postgres table "
                    f"{spec['config']['collection.name.format']})")
                return
        except (httpx.HTTPError, KeyError):
            pass
        time.sleep(0.5)
    still = f"; its task is still FAILED: {stale[0][:800]}" if stale else ""
    raise StackError("connect", f"sink {spec['name']} not RUNNING after {timeout_s:.0f}s{still}", log)


def _failed_tasks(url: str) -> dict[int, str]:
    """The connector's FAILED tasks by id, with their traces (none for a new connector)."""
    try:
        tasks = httpx.get(f"{url}/status", timeout=3).json().get("tasks", [])
    except (httpx.HTTPError, ValueError):
        return {}
    return {t["id"]: t.get("trace", "") for t in tasks if t.get("state") == "FAILED"}
