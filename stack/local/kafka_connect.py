"""The local stack's Kafka Connect: the distributed worker (its properties, start and health)
and the ledger's sinks (``sink_specs`` from ``connectors/*.json``, ``register_sink``: the
ledger's tables first, then each sink created or updated and waited for until RUNNING).

It exists so how the ledger reaches PostgreSQL is one part of the stack, with the one
registration the CLI's ``sink register`` and ``stack up`` both use.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

import httpx

from stack import isolated, processes
from stack.local.home import StackHome
from stack.local.kafka_nodes import KafkaNodes
from stack.local.postgres import apply_ledger_sql
from stack.local.startup import StackError, running_or_free, say, wait_healthy
from streams.runtime import kafka_config
from streams.runtime.settings import REPO_ROOT, Settings, environment

# the ledger's sinks (connectors/*.json); the tables and trigger they write into are
# postgres.LEDGER_SQL's
SINK_TEMPLATES = (REPO_ROOT / "connectors" / "ledger-sink.json",
                  REPO_ROOT / "connectors" / "recipient-outcomes-sink.json",
                  REPO_ROOT / "connectors" / "ses-feedback-sink.json")


@dataclass
class KafkaConnect:
    """The Connect worker of the stack whose home is ``home``, a client of ``nodes`` the way
    the stack's clients reach them (``KafkaNodes.clients_kafka_env``)."""

    home: StackHome
    nodes: KafkaNodes

    @property
    def s(self) -> Settings:
        return self.home.s

    def start_connect(self) -> None:
        name, pidfile, log = "connect", self.home.pidfile("connect"), self.home.log("connect")
        if running_or_free(name, pidfile, (self.s.connect_port,), "CRONSTREAM_CONNECT_PORT", log,
                            "kafka connect", self.s.host):
            return
        props = self.s.home / "connect" / "connect-distributed.properties"
        props.parent.mkdir(parents=True, exist_ok=True)
        # its internal topics exist already (admin.CONNECT_TOPICS, replicated as the setting
        # says); the factor here is what Connect would create them with if they did not
        try:
            factor = int(isolated.call("streams.runtime.admin:replication_settings",
                                       self.s.bootstrap, timeout_s=60, env=self.nodes.kafka_env())[0])
        except isolated.ChildCallFailed as exc:
            raise StackError(name, f"could not read the cluster's replication: {exc}", log) from exc
        clients = self.nodes.clients_kafka_env()
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
            f"plugin.path={self.home.plugins}",
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
        processes.spawn(pidfile, self.home.java(
            name, "org.apache.kafka.connect.cli.ConnectDistributed", "768m", str(props)), log)
        wait_healthy(name, self.connect_healthy, 120, log, pidfile)

    @property
    def connect_url(self) -> str:
        return self.s.connect_url

    def connect_healthy(self) -> bool:
        plugins = httpx.get(f"{self.connect_url}/connector-plugins", timeout=3).json()
        return any(p["class"].endswith("JdbcSinkConnector") for p in plugins)

    def register_sink(self) -> None:
        register_sink(self.connect_url, self.s, schemas_dir=REPO_ROOT / "schemas",
                      log=self.home.log("connect"))


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
