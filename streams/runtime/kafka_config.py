"""The one place a Kafka client's configuration is made: security and replication.

Every process cronstream runs talks to Kafka through three kinds of client: librdkafka
(confluent-kafka: the emitters, views, admin and CLI/bench consumers), aiokafka (faust's workers)
and Java (Kafka Connect and its sink). Why one module: a managed cluster (MSK, Confluent Cloud,
Aiven, Strimzi) wants TLS and SASL from every one of them, and a client left on PLAINTEXT is a
process that hangs at start; one mapping from one set of settings keeps them from drifting apart.

Settings (environment, read when a client is made):

- ``CRONSTREAM_KAFKA_SECURITY_PROTOCOL``: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL.
- ``CRONSTREAM_KAFKA_SASL_MECHANISM``: SCRAM-SHA-512 (default), SCRAM-SHA-256 or PLAIN.
- ``CRONSTREAM_KAFKA_SASL_USERNAME`` / ``CRONSTREAM_KAFKA_SASL_PASSWORD``.
- ``CRONSTREAM_KAFKA_CA_FILE``: a PEM file of the CA(s) that signed the brokers' certificates;
  unset means the system's trust store (what a public managed cluster needs).
- ``CRONSTREAM_REPLICATION_FACTOR`` / ``CRONSTREAM_MIN_INSYNC_REPLICAS``: of every topic,
  changelog and Connect internal topic cronstream creates; unset, 3 and 2 on a cluster of three
  brokers or more, 1 and 1 on a single broker (``replication_for``).

The functions here are pure (an environment mapping in, a configuration out) so the mapping is
unit-tested without a broker (tests/unit/test_kafka_config.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
_JAAS_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


class KafkaConfigError(SystemExit):
    """A Kafka setting that cannot work; the message names the variable. A ``SystemExit`` so a
    worker or the API stops at start with the message, not a traceback."""

    def __init__(self, message: str) -> None:
        super().__init__(f"kafka: {message}")


@dataclass(frozen=True)
class KafkaSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KafkaSecurity:
        """Read and check the settings: a SASL protocol without a user or password, or an
        unknown protocol or mechanism, stops here with the variable's name."""
        env = os.environ if env is None else env
        protocol = (env.get("CRONSTREAM_KAFKA_SECURITY_PROTOCOL") or "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise KafkaConfigError(f"CRONSTREAM_KAFKA_SECURITY_PROTOCOL={protocol!r} is not one "
                                   f"of {', '.join(PROTOCOLS)}")
        ca_file = env.get("CRONSTREAM_KAFKA_CA_FILE") or None
        if ca_file is not None and not protocol.endswith("SSL"):
            raise KafkaConfigError(f"CRONSTREAM_KAFKA_CA_FILE is set but the protocol {protocol} "
                                   "uses no TLS")
        if ca_file is not None and not os.path.isfile(ca_file):
            raise KafkaConfigError(f"CRONSTREAM_KAFKA_CA_FILE={ca_file!r}: no such file")
        if not protocol.startswith("SASL_"):
            return cls(protocol=protocol, ca_file=ca_file)
        mechanism = (env.get("CRONSTREAM_KAFKA_SASL_MECHANISM") or "SCRAM-SHA-512").upper()
        if mechanism not in MECHANISMS:
            raise KafkaConfigError(f"CRONSTREAM_KAFKA_SASL_MECHANISM={mechanism!r} is not one of "
                                   f"{', '.join(MECHANISMS)}")
        if mechanism == "PLAIN" and protocol == "SASL_PLAINTEXT":
            # PLAIN sends the password itself: without TLS, anyone on the path reads it (it was
            # accepted without a word: issue 40); SCRAM over SASL_PLAINTEXT sends only a proof
            raise KafkaConfigError("CRONSTREAM_KAFKA_SASL_MECHANISM=PLAIN sends the password in "
                                   "clear over SASL_PLAINTEXT: use SASL_SSL, or SCRAM-SHA-512")
        username = env.get("CRONSTREAM_KAFKA_SASL_USERNAME") or ""
        password = env.get("CRONSTREAM_KAFKA_SASL_PASSWORD") or ""
        if not username or not password:
            raise KafkaConfigError(f"{protocol} needs CRONSTREAM_KAFKA_SASL_USERNAME and "
                                   "CRONSTREAM_KAFKA_SASL_PASSWORD")
        return cls(protocol=protocol, mechanism=mechanism, username=username, password=password,
                   ca_file=ca_file)

    # -- librdkafka (confluent-kafka) ------------------------------------------------------------
    def librdkafka(self) -> dict[str, Any]:
        """``security.protocol``, ``sasl.*`` and ``ssl.ca.location`` for confluent-kafka; the
        broker's host name is checked against its certificate (librdkafka's default, kept)."""
        config: dict[str, Any] = {"security.protocol": self.protocol.lower()}
        if self.sasl:
            config.update({"sasl.mechanism": self.mechanism, "sasl.username": self.username,
                           "sasl.password": self.password})
        if self.ca_file:
            config["ssl.ca.location"] = self.ca_file
        return config

    # -- aiokafka (faust) ------------------------------------------------------------------------
    def faust(self) -> dict[str, Any]:
        """``broker_credentials`` for ``faust.App``: faust hands them to aiokafka's consumer and
        producers (``credentials_to_aiokafka_auth``). Empty on PLAINTEXT."""
        if self.protocol == "PLAINTEXT":
            return {}
        import faust
        from aiokafka.helpers import create_ssl_context

        context = create_ssl_context(cafile=self.ca_file) if self.tls else None
        if not self.sasl:
            return {"broker_credentials": faust.SSLCredentials(context)}
        return {"broker_credentials": faust.SASLCredentials(
            username=self.username, password=self.password, ssl_context=context,
            mechanism=self.mechanism)}

    # -- Java (Kafka Connect) --------------------------------------------------------------------
    def java_properties(self, prefix: str = "") -> list[str]:
        """The client properties of a Java client (``prefix``: Connect's ``producer.``,
        ``consumer.``, ``admin.`` overrides). The CA file is read as a PEM trust store
        (``ssl.truststore.type=PEM``, Kafka ≥ 2.7), so no JKS is made."""
        lines = [f"{prefix}security.protocol={self.protocol}"]
        if self.sasl:
            module = _JAAS_MODULES[str(self.mechanism)]
            lines += [f"{prefix}sasl.mechanism={self.mechanism}",
                      f'{prefix}sasl.jaas.config={module} required username="{_jaas(self.username)}" '
                      f'password="{_jaas(self.password)}";']
        if self.ca_file:
            lines += [f"{prefix}ssl.truststore.type=PEM",
                      f"{prefix}ssl.truststore.location={self.ca_file}"]
        return lines


def _jaas(value: str | None) -> str:
    """A JAAS string literal's content: quotes and backslashes escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"')


def security(env: Mapping[str, str] | None = None) -> KafkaSecurity:
    return KafkaSecurity.from_env(env)


def client_config(bootstrap: str, env: Mapping[str, str] | None = None,
                  **extra: Any) -> dict[str, Any]:
    """A confluent-kafka client's configuration: the bootstrap servers, the security settings,
    then ``extra`` (dotted librdkafka names passed as a mapping: ``**{"group.id": "g"}``)."""
    return {"bootstrap.servers": bootstrap, **security(env).librdkafka(), **extra}


def producer_config(bootstrap: str, env: Mapping[str, str] | None = None,
                    **extra: Any) -> dict[str, Any]:
    """``client_config`` of a producer: every write waits for all in-sync replicas
    (``acks=all``, so a leader lost a moment after acknowledging loses nothing) and is
    idempotent (a retry after a lost answer writes no duplicate)."""
    return client_config(bootstrap, env, **{"acks": "all", "enable.idempotence": True, **extra})


# -- replication ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Replication:
    factor: int
    min_insync: int

    def topic_configs(self) -> dict[str, str]:
        return {"min.insync.replicas": str(self.min_insync)}


def replication_for(brokers: int, env: Mapping[str, str] | None = None) -> Replication:
    """The replication of cronstream's topics on a cluster of ``brokers``: the settings if given,
    else 3 and 2 on three brokers or more (one broker may be lost, or restarted for an upgrade,
    while every write still reaches two), else every broker and 1. A factor the cluster cannot
    meet, or a minimum above the factor, stops here: the broker would refuse every create, and
    every ``acks=all`` write with too few replicas in sync."""
    env = os.environ if env is None else env
    default = Replication(3, 2) if brokers >= 3 else Replication(max(brokers, 1), 1)
    factor = _positive(env, "CRONSTREAM_REPLICATION_FACTOR", default.factor)
    min_insync = _positive(env, "CRONSTREAM_MIN_INSYNC_REPLICAS",
                           default.min_insync if factor == default.factor else max(factor - 1, 1))
    if brokers and factor > brokers:
        raise KafkaConfigError(f"CRONSTREAM_REPLICATION_FACTOR={factor} but the cluster has "
                               f"{brokers} broker(s)")
    if min_insync > factor:
        raise KafkaConfigError(f"CRONSTREAM_MIN_INSYNC_REPLICAS={min_insync} is above the "
                               f"replication factor {factor}")
    return Replication(factor, min_insync)


def _positive(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise KafkaConfigError(f"{name}={raw!r} is not a whole number >= 1")
    return int(raw)
