"""The local stack's Kafka: its KRaft nodes (server properties, ports, storage and cluster id,
start, health and stop) and the secure stack's listeners (SASL_SSL with SCRAM users, mTLS,
OAUTHBEARER) with the client settings each way in needs.

It exists so everything about the brokers, and about how a client reaches them, is in one
place: Connect, the apps and the CLI ask ``KafkaNodes`` for the settings of their way in.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from stack import isolated, processes
from stack.local.certificates import Certificates
from stack.local.home import StackHome
from stack.local.startup import StackError, port_busy, running_or_free, say, wait_healthy
from streams.runtime.settings import Settings

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
GROUP_INITIAL_DELAY_MS = 3000  # server_properties: Kafka's own default

# How the clients of a secure stack (``up --secure``) may authenticate (``up --kafka-auth``):
# SCRAM (or PLAIN) on its SASL_SSL listener, and on a listener each beside it a client
# certificate (mutual TLS) or an OAUTHBEARER token: name, protocol, port above the client port.
KAFKA_AUTHS = ("scram", "mtls", "oauth")
EXTRA_LISTENERS = {"mtls": ("MTLS", "SSL", 50), "oauth": ("OAUTH", "SASL_SSL", 51)}
# the scope the OAUTHBEARER listener requires of every token (unsecuredValidatorRequiredScope)
OAUTH_SCOPE = "cronstream"



def kafka_cluster_id() -> str:
    """A random KRaft cluster id, as Kafka's ``Uuid.randomUuid`` makes them: never starting with
    "-", which kafka-storage's argument parser takes for an option (a fresh-clone run failed to
    format storage that way, 1 time in 64)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


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


@dataclass
class KafkaNodes:
    """The KRaft nodes of the stack whose home is ``home`` (broker and controller in one JVM
    each), and the secure listeners' settings (``certificates``) when it is ``up --secure``."""

    home: StackHome
    certificates: Certificates

    @property
    def s(self) -> Settings:
        return self.home.s

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
            # Kafka's default: an empty group waits 3 s for more members before its first
            # assignment, so workers started together share it. At 0 the first worker to join
            # took every partition and indexed them all (10M jobs: 169 s) while the others
            # waited for its rebalance (bench.scale --workers 2: ready in 244.7 s, not ≈ 100)
            f"group.initial.rebalance.delay.ms={GROUP_INITIAL_DELAY_MS}",
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
                "CRONSTREAM_KAFKA_SASL_PASSWORD": self.home.secret("", "kafka-cronstream.password"),
                "CRONSTREAM_KAFKA_CA_FILE": str(self.certificates.dir / "ca.pem")}

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
                  "CRONSTREAM_KAFKA_CA_FILE": str(self.certificates.dir / "ca.pem")}
        if auth == "mtls":
            return {**common, "CRONSTREAM_KAFKA_SECURITY_PROTOCOL": "SSL",
                    "CRONSTREAM_KAFKA_CERT_FILE": str(self.certificates.dir / "client.crt"),
                    "CRONSTREAM_KAFKA_KEY_FILE": str(self.certificates.dir / "client.key")}
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

    def check_kafka_auth(self, auth: str) -> None:
        """``auth`` is a way in (``KAFKA_AUTHS``) this stack has: all but scram need ``--secure``."""
        if auth not in KAFKA_AUTHS:
            raise StackError("kafka", f"--kafka-auth {auth!r} is not one of {', '.join(KAFKA_AUTHS)}")
        if auth != "scram" and not self.secure:
            raise StackError("kafka", f"--kafka-auth {auth} needs a secure stack (up --secure)")

    def record_kafka_auth(self, auth: str) -> None:
        """Record ``auth`` in the home as the way the stack's clients reach Kafka (``kafka_auth``)."""
        record = self.s.home / "kafka" / "client-auth"
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(f"{auth}\n")

    def write_client_env(self) -> None:
        """``secure/client.env`` (mode 0600) for the CLI: the settings of the stack's way in;
        nothing on a PLAINTEXT stack."""
        if self.secure:
            client_env = self.certificates.dir / "client.env"
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
        admin = self.home.secret("", "kafka-admin.password")
        client = self.home.secret("", "kafka-cronstream.password")
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
            f"ssl.keystore.location={self.certificates.dir / 'broker.pem'}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={self.certificates.dir / 'ca.pem'}",
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
            out += ["--add-scram", f"SCRAM-SHA-512=[name={user},password={self.home.secret('', name)}]"]
        return out

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
            self.certificates.ensure()
        record_brokers(self.s.home, brokers, [self.node_ports(n)[0] for n in range(1, brokers + 1)],
                       self.s.host)
        started = [node for node in range(1, brokers + 1) if self.start_kafka_node(node, brokers)]
        if not started:
            return
        log = self.home.log("kafka")
        wait_healthy("kafka", lambda: self.kafka_healthy(brokers), 90 + 30 * (brokers - 1), log,
              self.home.pidfile("kafka"))

    def start_kafka_node(self, node: int, brokers: int) -> bool:
        """Format (first start) and spawn node ``node``; False if it already runs."""
        name, pidfile, log = self.node_name(node), self.home.pidfile(self.node_name(node)), \
            self.home.log(self.node_name(node))
        if running_or_free(name, pidfile, self.node_listen_ports(node),
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
                    self.home.java("kafka-storage", "kafka.tools.StorageTool", "256m",
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
        processes.spawn(pidfile, self.home.java(name, "kafka.Kafka", heap, str(props)), log)
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
        return port_busy(self.s.kafka_port, self.s.host) and all(
            kafka_lists_a_broker(f"{self.s.host}:{self.node_ports(node)[0]}", at_least=brokers,
                                 env=self.kafka_env())
            for node in range(1, brokers + 1))

    def stop_kafka(self) -> list[str]:
        """Stop every node at once (TERM to all, then wait): stopped one after another, the
        last nodes of a quorum that lost its majority wait out their controlled shutdown."""
        names = [self.node_name(n) for n in range(self.brokers, 0, -1)]
        pids = {name: processes.alive(self.home.pidfile(name)) for name in names}
        for pid in pids.values():
            if pid is not None:
                os.kill(pid, signal.SIGTERM)
        for name in names:
            processes.stop(self.home.pidfile(name), timeout_s=30)
        return [name for name in names if pids[name] is not None]

