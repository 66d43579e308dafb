"""The stack's own processes: the workers and the API (``cli.main`` run from the venv), each
started with the environment it needs (``app_env``: the stack's home and ports, the way in to
Kafka, the local SES server, the secrets, the region) and waited for until it is ready.

It exists so what the apps are given, and how they are started, is one part of the stack
(``stack.processes`` below it spawns, finds and stops any process by its pid file).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from stack import processes
from stack.local.home import StackHome, region_record
from stack.local.kafka_nodes import KafkaNodes
from stack.local.startup import say, wait_healthy
from stack.sms_server import INBOUND_TOPIC_ARN
from stack.sns_publisher import LOCAL_TOPIC_ARN
from streams.runtime.settings import API_START_S, REPO_ROOT, Settings


@dataclass
class Apps:
    """The workers and the API of the stack whose home is ``home``, clients of ``nodes``."""

    home: StackHome
    nodes: KafkaNodes

    @property
    def s(self) -> Settings:
        return self.home.s

    def start_app(self, name: str, args: list[str], health: Callable[[], bool] | None = None,
                  env: dict[str, str] | None = None, ready_timeout_s: float = 60,
                  wrap: list[str] | None = None) -> int:
        """``wrap``: a command that execs the app's (the security tests run it in a mount
        namespace with their own name server: tests/security/conftest.py)."""
        pidfile, log = self.home.pidfile(name), self.home.log(name)
        pid = processes.alive(pidfile)
        if pid:
            say(f"{name} already running (pid {pid})")
            return pid
        say(f"starting {name} (log: {log})")
        pid = processes.spawn(pidfile, [*(wrap or []), sys.executable, "-m", "cli.main", *args], log,
                              env={**os.environ, **self.app_env(), **(env or {})}, cwd=REPO_ROOT)
        if health is not None:
            wait_healthy(name, health, ready_timeout_s, log, pidfile)
        return pid

    def start_api(self, wrap: list[str] | None = None) -> int:
        """Start the API and wait for its health as long as its first catch-up may take."""
        return self.start_app("api", ["api"], health=self.api_healthy,
                              ready_timeout_s=API_START_S + 30, wrap=wrap)

    def start_worker(self, name: str, ready_timeout_s: float = 60,
                     wrap: list[str] | None = None) -> int:
        """Start a worker and wait until it has recovered its partitions and can fire."""
        ready = self.s.run_dir / f"{name}.ready"
        if processes.alive(self.home.pidfile(name)) is None:
            ready.unlink(missing_ok=True)
        number = int(name.rsplit("-", 1)[1]) if name.rsplit("-", 1)[-1].isdigit() else 0
        return self.start_app(name, ["worker"], health=ready.exists, env={
            "CRONSTREAM_WORKER_ID": name,
            "CRONSTREAM_WORKER_WEB_PORT": str(self.s.worker_web_port + number),
            "CRONSTREAM_WORKER_METRICS_PORT": str(self.s.worker_metrics_port + number)},
            ready_timeout_s=ready_timeout_s, wrap=wrap)

    def app_env(self, kafka_auth: str | None = None) -> dict[str, str]:
        """What the workers and the API need: Kafka as ``kafka_auth`` (default the stack's)
        reaches it, the local SES and SMS servers, AWS-style credentials for them, the unsubscribe signing
        secret and the operator key (generated once into .local/, never committed)."""
        return {**self.settings_env(), **self.nodes.clients_kafka_env(kafka_auth), **self.region_env(),
                "CRONSTREAM_SES_ENDPOINT": self.s.ses_endpoint,
                "CRONSTREAM_SMS_ENDPOINT": self.s.sms_endpoint,
                "CRONSTREAM_UNSUBSCRIBE_SECRET": self.home.secret("CRONSTREAM_UNSUBSCRIBE_SECRET",
                                                             "unsubscribe.key"),
                "CRONSTREAM_OPERATOR_KEY": self.home.secret("CRONSTREAM_OPERATOR_KEY", "operator.key"),
                "AWS_ACCESS_KEY_ID": self.s.given("AWS_ACCESS_KEY_ID") or "local",
                "AWS_SECRET_ACCESS_KEY": self.s.given("AWS_SECRET_ACCESS_KEY") or "local",
                "AWS_REGION": self.s.aws_region,
                # the feedback endpoint trusts the local SES server's SNS topic (its events) and
                # the SMS server's (the numbers' inbound texts) and their certificate, served
                # over plain http on loopback (stack.sns_publisher)
                "CRONSTREAM_SNS_TOPICS": self.s.given("CRONSTREAM_SNS_TOPICS")
                or f"{LOCAL_TOPIC_ARN},{INBOUND_TOPIC_ARN}",
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

    def api_healthy(self) -> bool:
        return httpx.get(f"{self.s.api_url}/healthz", timeout=2).status_code == 200

    def app_names(self) -> list[str]:
        if not self.s.run_dir.exists():
            return []
        infra = {"kafka", "connect", "ses", "mirror"}
        return sorted(p.stem for p in self.s.run_dir.glob("*.pid")
                      if p.stem not in infra and not p.stem.startswith("kafka-"))

    def start_apps(self, workers: int = 1) -> None:
        """The workers, then the API."""
        for i in range(1, workers + 1):
            self.start_worker(f"worker-{i}")
        self.start_api()
