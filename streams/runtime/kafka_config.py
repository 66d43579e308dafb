"""The one place a Kafka client's configuration is made: security and replication.

Every process cronstream runs talks to Kafka through three kinds of client: librdkafka
(confluent-kafka: the emitters, views, admin and CLI/bench consumers), aiokafka (faust's workers)
and Java (Kafka Connect and its sink). Why one module: a managed cluster (MSK, Confluent Cloud,
Aiven, Strimzi) wants TLS and SASL from every one of them, and a client left on PLAINTEXT is a
process that hangs at start; one mapping from one set of settings keeps them from drifting apart.

Settings (the environment as ``streams.runtime.settings.environment`` hands it, the one reader,
when a client is made; or a mapping the caller gives):

- ``CRONSTREAM_KAFKA_SECURITY_PROTOCOL``: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL.
- ``CRONSTREAM_KAFKA_SASL_MECHANISM``: SCRAM-SHA-512 (default), SCRAM-SHA-256, PLAIN or
  OAUTHBEARER.
- ``CRONSTREAM_KAFKA_SASL_USERNAME`` / ``CRONSTREAM_KAFKA_SASL_PASSWORD``.
- ``CRONSTREAM_KAFKA_CA_FILE``: a PEM file of the CA(s) that signed the brokers' certificates;
  unset means the system's trust store (what a public managed cluster needs).
- ``CRONSTREAM_KAFKA_CERT_FILE`` / ``CRONSTREAM_KAFKA_KEY_FILE`` (``_SSL_KEY_PASSWORD``): a
  client certificate and its PEM key (PKCS#8, as Java reads it) for mutual TLS (Aiven's default).
- OAUTHBEARER: ``CRONSTREAM_KAFKA_OAUTH_PROVIDER`` ``oidc`` (default: the client credentials
  grant at ``CRONSTREAM_KAFKA_OAUTH_TOKEN_URL`` with ``_CLIENT_ID``, ``_CLIENT_SECRET``,
  ``_SCOPE``), ``unsecured`` (an unsigned JWT for the user ``_SASL_USERNAME``, what Kafka's
  default unsecured validator takes: test clusters only) or ``aws-msk-iam`` (tokens from AWS's
  ``aws-msk-iam-sasl-signer-python``, region ``AWS_REGION``; Connect needs AWS's
  ``aws-msk-iam-auth`` jar).
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

from streams.runtime.settings import environment, resolve_secret_files

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "OAUTHBEARER")
OAUTH_PROVIDERS = ("oidc", "unsecured", "aws-msk-iam")
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_MSK_HANDLER = "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler"
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
    cert_file: str | None = None  # mutual TLS: the client's certificate and key
    key_file: str | None = None
    key_password: str | None = None
    oauth_provider: str | None = None  # OAUTHBEARER: oidc, unsecured or aws-msk-iam
    token_url: str | None = None
    client_id: str | None = None
    client_secret: str | None = None
    scope: str | None = None
    region: str | None = None

    @property
    def oauth(self) -> bool:
        return self.mechanism == "OAUTHBEARER"

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def describe(self) -> str:
        """How a client made with these settings speaks to the broker, for a line that names
        what it tried (never a secret): ``SASL_SSL, SCRAM-SHA-512``, ``SSL, client
        certificate``, ``SASL_SSL, OAUTHBEARER (oidc)``, ``PLAINTEXT``."""
        way = [self.protocol]
        if self.oauth:
            way.append(f"OAUTHBEARER ({self.oauth_provider})")
        elif self.sasl:
            way.append(str(self.mechanism))
        if self.cert_file:
            way.append("client certificate")
        return ", ".join(way)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KafkaSecurity:
        """Read and check the settings: a SASL protocol without a user or password, or an
        unknown protocol or mechanism, stops here with the variable's name."""
        # a secret may come from a file (NAME_FILE: streams.runtime.settings), in any process
        env = dict(environment() if env is None else env)
        resolve_secret_files(env)
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
        cert_file = env.get("CRONSTREAM_KAFKA_CERT_FILE") or None
        key_file = env.get("CRONSTREAM_KAFKA_KEY_FILE") or None
        if (cert_file is None) != (key_file is None):
            raise KafkaConfigError("CRONSTREAM_KAFKA_CERT_FILE and CRONSTREAM_KAFKA_KEY_FILE go "
                                   "together (mutual TLS)")
        if cert_file is not None and not protocol.endswith("SSL"):
            raise KafkaConfigError(f"CRONSTREAM_KAFKA_CERT_FILE is set but the protocol {protocol} "
                                   "uses no TLS")
        for name, path in (("CRONSTREAM_KAFKA_CERT_FILE", cert_file),
                           ("CRONSTREAM_KAFKA_KEY_FILE", key_file)):
            if path is not None and not os.path.isfile(path):
                raise KafkaConfigError(f"{name}={path!r}: no such file")
        tls = {"ca_file": ca_file, "cert_file": cert_file, "key_file": key_file,
               "key_password": env.get("CRONSTREAM_KAFKA_SSL_KEY_PASSWORD") or None}
        if not protocol.startswith("SASL_"):
            return cls(protocol=protocol, **tls)
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
        if mechanism == "OAUTHBEARER":
            return cls(protocol=protocol, mechanism=mechanism, username=username or None,
                       **cls._oauth_from_env(env, username), **tls)
        if not username or not password:
            raise KafkaConfigError(f"{protocol} needs CRONSTREAM_KAFKA_SASL_USERNAME and "
                                   "CRONSTREAM_KAFKA_SASL_PASSWORD")
        return cls(protocol=protocol, mechanism=mechanism, username=username, password=password,
                   **tls)

    @staticmethod
    def _oauth_from_env(env: Mapping[str, str], username: str) -> dict[str, Any]:
        provider = (env.get("CRONSTREAM_KAFKA_OAUTH_PROVIDER") or "oidc").lower()
        if provider not in OAUTH_PROVIDERS:
            raise KafkaConfigError(f"CRONSTREAM_KAFKA_OAUTH_PROVIDER={provider!r} is not one of "
                                   f"{', '.join(OAUTH_PROVIDERS)}")
        found = {"oauth_provider": provider,
                 "token_url": env.get("CRONSTREAM_KAFKA_OAUTH_TOKEN_URL") or None,
                 "client_id": env.get("CRONSTREAM_KAFKA_OAUTH_CLIENT_ID") or None,
                 "client_secret": env.get("CRONSTREAM_KAFKA_OAUTH_CLIENT_SECRET") or None,
                 "scope": env.get("CRONSTREAM_KAFKA_OAUTH_SCOPE") or None,
                 "region": env.get("AWS_REGION") or None}
        if provider == "oidc" and not (found["token_url"] and found["client_id"]
                                       and found["client_secret"]):
            raise KafkaConfigError("OAUTHBEARER (oidc) needs CRONSTREAM_KAFKA_OAUTH_TOKEN_URL, "
                                   "_CLIENT_ID and _CLIENT_SECRET")
        if provider == "unsecured" and not username:
            raise KafkaConfigError("OAUTHBEARER (unsecured) needs CRONSTREAM_KAFKA_SASL_USERNAME "
                                   "(the token's subject)")
        if provider == "aws-msk-iam":
            if not found["region"]:
                raise KafkaConfigError("OAUTHBEARER (aws-msk-iam) needs AWS_REGION")
            try:
                import aws_msk_iam_sasl_signer  # noqa: F401
            except ImportError as exc:
                raise KafkaConfigError("OAUTHBEARER (aws-msk-iam) needs the package "
                                       "aws-msk-iam-sasl-signer-python (pip install "
                                       "'cronstream[msk]')") from exc
        return found

    # -- librdkafka (confluent-kafka) ------------------------------------------------------------
    def librdkafka(self) -> dict[str, Any]:
        """``security.protocol``, ``sasl.*`` and ``ssl.ca.location`` for confluent-kafka; the
        broker's host name is checked against its certificate (librdkafka's default, kept)."""
        config: dict[str, Any] = {"security.protocol": self.protocol.lower()}
        if self.sasl and not self.oauth:
            config.update({"sasl.mechanism": self.mechanism, "sasl.username": self.username,
                           "sasl.password": self.password})
        elif self.oauth:
            config["sasl.mechanism"] = "OAUTHBEARER"
            if self.oauth_provider == "oidc":
                config.update({"sasl.oauthbearer.method": "oidc",
                               "sasl.oauthbearer.token.endpoint.url": self.token_url,
                               "sasl.oauthbearer.client.id": self.client_id,
                               "sasl.oauthbearer.client.secret": self.client_secret})
                if self.scope:
                    config["sasl.oauthbearer.scope"] = self.scope
            else:  # unsecured and aws-msk-iam: a token made here, in Python
                config["oauth_cb"] = self._librdkafka_token
        if self.ca_file:
            config["ssl.ca.location"] = self.ca_file
        if self.cert_file:
            config.update({"ssl.certificate.location": self.cert_file,
                           "ssl.key.location": self.key_file})
            if self.key_password:
                config["ssl.key.password"] = self.key_password
        return config

    def token(self) -> tuple[str, float]:
        """An OAUTHBEARER token made in process and its expiry (seconds since the epoch): an
        unsigned JWT for ``unsecured``, AWS's signed MSK IAM token for ``aws-msk-iam``."""
        if self.oauth_provider == "aws-msk-iam":
            from aws_msk_iam_sasl_signer import MSKAuthTokenProvider

            token, expiry_ms = MSKAuthTokenProvider.generate_auth_token(self.region)
            return token, expiry_ms / 1000
        return unsecured_jwt(str(self.username), self.scope)

    def _librdkafka_token(self, _config: str) -> tuple[str, float]:
        return self.token()

    # -- aiokafka (faust) ------------------------------------------------------------------------
    def faust(self) -> dict[str, Any]:
        """``broker_credentials`` for ``faust.App``: faust hands them to aiokafka's consumer and
        producers (``credentials_to_aiokafka_auth``). Empty on PLAINTEXT."""
        if self.protocol == "PLAINTEXT":
            return {}
        import faust
        from aiokafka.helpers import create_ssl_context

        context = create_ssl_context(cafile=self.ca_file, certfile=self.cert_file,
                                     keyfile=self.key_file, password=self.key_password
                                     ) if self.tls else None
        if not self.sasl:
            return {"broker_credentials": faust.SSLCredentials(context)}
        if self.oauth:
            from aiokafka.abc import AbstractTokenProvider

            # aiokafka takes only its ABC's instances (a check in aiokafka/conn.py that stopped
            # the worker on the secure stack's OAUTHBEARER listener); registered here, not
            # subclassed, so importing this module imports no aiokafka
            AbstractTokenProvider.register(_AiokafkaTokens)
            return {"broker_credentials": faust.OAuthCredentials(
                oauth_cb=_AiokafkaTokens(self), ssl_context=context)}
        return {"broker_credentials": faust.SASLCredentials(
            username=self.username, password=self.password, ssl_context=context,
            mechanism=self.mechanism)}

    # -- Java (Kafka Connect) --------------------------------------------------------------------
    def java_properties(self, prefix: str = "") -> list[str]:
        """The client properties of a Java client (``prefix``: Connect's ``producer.``,
        ``consumer.``, ``admin.`` overrides). The CA file is read as a PEM trust store
        (``ssl.truststore.type=PEM``, Kafka ≥ 2.7), so no JKS is made."""
        lines = [f"{prefix}security.protocol={self.protocol}"]
        if self.oauth:
            lines += [f"{prefix}sasl.mechanism=OAUTHBEARER", *self._java_oauth(prefix)]
        elif self.sasl:
            module = _JAAS_MODULES[str(self.mechanism)]
            lines += [f"{prefix}sasl.mechanism={self.mechanism}",
                      f'{prefix}sasl.jaas.config={module} required username="{_jaas(self.username)}" '
                      f'password="{_jaas(self.password)}";']
        if self.ca_file:
            lines += [f"{prefix}ssl.truststore.type=PEM",
                      f"{prefix}ssl.truststore.location={self.ca_file}"]
        if self.cert_file and self.key_file:
            # PEM in the properties themselves: Java's PEM key store wants key and chain in one
            # file, ours are two (java.util.Properties reads the \n escapes back as newlines)
            lines += [f"{prefix}ssl.keystore.type=PEM",
                      f"{prefix}ssl.keystore.certificate.chain={_pem_value(self.cert_file)}",
                      f"{prefix}ssl.keystore.key={_pem_value(self.key_file)}"]
            if self.key_password:
                lines.append(f"{prefix}ssl.key.password={self.key_password}")
        return lines

    def _java_oauth(self, prefix: str) -> list[str]:
        if self.oauth_provider == "oidc":
            scope = f' scope="{_jaas(self.scope)}"' if self.scope else ""
            return [f"{prefix}sasl.oauthbearer.token.endpoint.url={self.token_url}",
                    f"{prefix}sasl.login.callback.handler.class=org.apache.kafka.common.security."
                    "oauthbearer.OAuthBearerLoginCallbackHandler",
                    f'{prefix}sasl.jaas.config={_OAUTH_MODULE} required clientId='
                    f'"{_jaas(self.client_id)}" clientSecret="{_jaas(self.client_secret)}"{scope};']
        if self.oauth_provider == "aws-msk-iam":
            return [f"{prefix}sasl.login.callback.handler.class={_MSK_HANDLER}",
                    f"{prefix}sasl.client.callback.handler.class={_MSK_HANDLER}",
                    f"{prefix}sasl.jaas.config={_OAUTH_MODULE} required;"]
        # the scope as a list claim (the first character is the list's separator), as the
        # Python token carries it
        scope = f' unsecuredLoginListClaim_scope=" {_jaas(self.scope)}"' if self.scope else ""
        return [f'{prefix}sasl.jaas.config={_OAUTH_MODULE} required '
                f'unsecuredLoginStringClaim_sub="{_jaas(self.username)}"{scope};']


def unsecured_jwt(subject: str, scope: str | None = None, lifetime_s: int = 3600,
                  now: float | None = None) -> tuple[str, float]:
    """An unsigned JWT (``alg: none``) as Kafka's default OAUTHBEARER validator
    (``OAuthBearerUnsecuredValidatorCallbackHandler``) accepts it: ``sub``, ``iat``, ``exp``,
    and ``scope`` as the list of its space-separated names (what the validator's
    ``unsecuredValidatorRequiredScope`` is checked against). Only for a cluster that validates
    nothing (tests); its expiry in seconds since the epoch."""
    import base64
    import json
    import time

    issued = time.time() if now is None else now
    claims: dict[str, Any] = {"sub": subject, "iat": int(issued), "exp": int(issued) + lifetime_s}
    if scope:
        claims["scope"] = scope.split()

    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part(claims)}.", float(claims["exp"])


class _AiokafkaTokens:
    """aiokafka's ``AbstractTokenProvider`` (a virtual subclass: ``KafkaSecurity.faust``
    registers it): a token of the settings' provider, the client credentials grant done here
    for ``oidc``."""

    def __init__(self, security: KafkaSecurity) -> None:
        self.security = security

    async def token(self) -> str:
        if self.security.oauth_provider != "oidc":
            return self.security.token()[0]
        import httpx

        form = {"grant_type": "client_credentials", **({"scope": self.security.scope}
                                                        if self.security.scope else {})}
        async with httpx.AsyncClient(verify=self.security.ca_file or True, timeout=30) as http:
            answer = await http.post(str(self.security.token_url), data=form, auth=(
                str(self.security.client_id), str(self.security.client_secret)))
        answer.raise_for_status()
        return str(answer.json()["access_token"])

    def extensions(self) -> dict[str, str]:
        return {}


def _pem_value(path: str) -> str:
    with open(path) as pem:
        return pem.read().strip().replace("\n", "\\n")


def _jaas(value: str | None) -> str:
    """A JAAS string literal's content: quotes and backslashes escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"')


def security(env: Mapping[str, str] | None = None) -> KafkaSecurity:
    return KafkaSecurity.from_env(env)


# librdkafka's own log lines (``%3|…|FAIL|…`` on stderr): every process keeps them but the
# CLI's short commands, which say what went wrong in one line of their own and show them only
# with ``--verbose`` (``quiet_client_logs``)
_QUIET = {"quiet": False}


def quiet_client_logs(quiet: bool = True) -> None:
    """Make every client this process creates from now on keep librdkafka's log lines to
    itself (``log_level`` 0: none is written), or write them again (its default level)."""
    _QUIET["quiet"] = quiet


def client_config(bootstrap: str, env: Mapping[str, str] | None = None,
                  **extra: Any) -> dict[str, Any]:
    """A confluent-kafka client's configuration: the bootstrap servers, the security settings,
    then ``extra`` (dotted librdkafka names passed as a mapping: ``**{"group.id": "g"}``)."""
    quiet = {"log_level": 0} if _QUIET["quiet"] else {}
    return {"bootstrap.servers": bootstrap, **security(env).librdkafka(), **quiet, **extra}


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
    env = environment() if env is None else env
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
