"""The one mapping from cronstream's Kafka settings to each client's configuration
(``streams.runtime.kafka_config``): librdkafka, aiokafka (faust) and Java (Connect)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.runtime.kafka_config import (
    KafkaConfigError,
    KafkaSecurity,
    Replication,
    client_config,
    producer_config,
    replication_for,
)

SCRAM = {"CRONSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
         "CRONSTREAM_KAFKA_SASL_USERNAME": "cronstream", "CRONSTREAM_KAFKA_SASL_PASSWORD": 'p"w'}


@pytest.fixture()
def ca_file(tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\n")
    return str(path)


def test_plaintext_is_the_default_and_adds_nothing_but_the_protocol() -> None:
    assert client_config("b:1", env={}) == {"bootstrap.servers": "b:1",
                                            "security.protocol": "plaintext"}
    assert KafkaSecurity.from_env({}).faust() == {}
    assert KafkaSecurity.from_env({}).java_properties() == ["security.protocol=PLAINTEXT"]


def test_sasl_ssl_reaches_librdkafka(ca_file: str) -> None:
    env = {**SCRAM, "CRONSTREAM_KAFKA_CA_FILE": ca_file}
    assert client_config("b:1", env=env, **{"group.id": "g"}) == {
        "bootstrap.servers": "b:1", "security.protocol": "sasl_ssl",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "cronstream",
        "sasl.password": 'p"w', "ssl.ca.location": ca_file, "group.id": "g"}


def test_producers_ack_all_and_are_idempotent() -> None:
    config = producer_config("b:1", env={}, **{"linger.ms": 5})
    assert config["acks"] == "all" and config["enable.idempotence"] is True
    assert config["linger.ms"] == 5


def test_plain_mechanism_and_java_properties_with_prefix(ca_file: str) -> None:
    env = {**SCRAM, "CRONSTREAM_KAFKA_SASL_MECHANISM": "plain", "CRONSTREAM_KAFKA_CA_FILE": ca_file}
    lines = KafkaSecurity.from_env(env).java_properties("consumer.")
    assert lines == [
        "consumer.security.protocol=SASL_SSL",
        "consumer.sasl.mechanism=PLAIN",
        'consumer.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule '
        'required username="cronstream" password="p\\"w";',
        "consumer.ssl.truststore.type=PEM",
        f"consumer.ssl.truststore.location={ca_file}"]


def test_scram_java_login_module() -> None:
    (jaas,) = [line for line in KafkaSecurity.from_env(SCRAM).java_properties()
               if "jaas" in line]
    assert "scram.ScramLoginModule required" in jaas


def test_faust_gets_sasl_credentials_over_tls() -> None:
    import faust

    creds = KafkaSecurity.from_env(SCRAM).faust()["broker_credentials"]
    assert isinstance(creds, faust.SASLCredentials)
    assert (creds.protocol.value, creds.mechanism.value) == ("SASL_SSL", "SCRAM-SHA-512")
    assert (creds.username, creds.password) == ("cronstream", 'p"w')
    assert creds.ssl_context is not None and creds.ssl_context.check_hostname


def test_faust_sasl_plaintext_has_no_tls_context() -> None:
    env = {**SCRAM, "CRONSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"}
    creds = KafkaSecurity.from_env(env).faust()["broker_credentials"]
    assert creds.protocol.value == "SASL_PLAINTEXT" and creds.ssl_context is None


def test_faust_ssl_only() -> None:
    import faust

    env = {"CRONSTREAM_KAFKA_SECURITY_PROTOCOL": "SSL"}
    assert isinstance(KafkaSecurity.from_env(env).faust()["broker_credentials"],
                      faust.SSLCredentials)


@pytest.mark.parametrize(("env", "named"), [
    ({"CRONSTREAM_KAFKA_SECURITY_PROTOCOL": "TLS"}, "CRONSTREAM_KAFKA_SECURITY_PROTOCOL"),
    ({**SCRAM, "CRONSTREAM_KAFKA_SASL_MECHANISM": "GSSAPI"}, "CRONSTREAM_KAFKA_SASL_MECHANISM"),
    ({**SCRAM, "CRONSTREAM_KAFKA_SASL_PASSWORD": ""}, "CRONSTREAM_KAFKA_SASL_PASSWORD"),
    ({**SCRAM, "CRONSTREAM_KAFKA_CA_FILE": "/nonexistent/ca.pem"}, "CRONSTREAM_KAFKA_CA_FILE"),
    ({"CRONSTREAM_KAFKA_CA_FILE": "/etc/hostname"}, "uses no TLS"),
])
def test_settings_that_cannot_work_stop_with_the_variable_named(env: dict[str, str],
                                                                 named: str) -> None:
    with pytest.raises(KafkaConfigError, match=named):
        KafkaSecurity.from_env(env)


@pytest.mark.parametrize(("brokers", "env", "want"), [
    (1, {}, Replication(1, 1)),
    (2, {}, Replication(2, 1)),
    (3, {}, Replication(3, 2)),
    (5, {}, Replication(3, 2)),
    (5, {"CRONSTREAM_REPLICATION_FACTOR": "5"}, Replication(5, 4)),
    (3, {"CRONSTREAM_REPLICATION_FACTOR": "3", "CRONSTREAM_MIN_INSYNC_REPLICAS": "3"},
     Replication(3, 3)),
    (3, {"CRONSTREAM_REPLICATION_FACTOR": "1"}, Replication(1, 1)),
])
def test_replication_defaults_follow_the_broker_count(brokers: int, env: dict[str, str],
                                                      want: Replication) -> None:
    assert replication_for(brokers, env) == want


@pytest.mark.parametrize(("brokers", "env", "named"), [
    (1, {"CRONSTREAM_REPLICATION_FACTOR": "3"}, "has 1 broker"),
    (3, {"CRONSTREAM_MIN_INSYNC_REPLICAS": "4"}, "above the replication factor"),
    (3, {"CRONSTREAM_REPLICATION_FACTOR": "0"}, "CRONSTREAM_REPLICATION_FACTOR"),
])
def test_replication_the_cluster_cannot_meet_is_refused(brokers: int, env: dict[str, str],
                                                        named: str) -> None:
    with pytest.raises(KafkaConfigError, match=named):
        replication_for(brokers, env)


def test_min_insync_is_a_topic_config() -> None:
    assert Replication(3, 2).topic_configs() == {"min.insync.replicas": "2"}


# -- the startup diagnosis (streams.runtime.admin.diagnose) ---------------------------------------
@pytest.mark.parametrize(("code", "text", "cause"), [
    ("_AUTHENTICATION", "SASL authentication error: Authentication failed during authentication "
     "due to invalid credentials with SASL mechanism SCRAM-SHA-512", "SASL authentication failed"),
    ("_SSL", "127.0.0.1:9093/bootstrap: SSL handshake failed: error:0A000086:SSL routines::"
     "certificate verify failed: broker certificate could not be verified",
     "TLS handshake failed"),
    ("_TRANSPORT", "127.0.0.1:9093/bootstrap: SSL handshake failed: certificate verify failed",
     "TLS handshake failed"),
    ("_TRANSPORT", "127.0.0.1:9093/bootstrap: Disconnected while requesting ApiVersion: might be "
     "caused by incorrect security.protocol configuration", "the broker closed the connection"),
])
def test_a_connection_error_is_named_with_its_cause(code: str, text: str, cause: str) -> None:
    from confluent_kafka import KafkaError

    from streams.runtime.admin import diagnose

    said = diagnose(KafkaError(getattr(KafkaError, code), text), "127.0.0.1:9093")
    assert said is not None and said.startswith(f"kafka at 127.0.0.1:9093 (PLAINTEXT): {cause}"), said
    assert text in said


# what librdkafka said against the secure stack's mTLS and OAUTHBEARER listeners (2026-11-28)
CERT_ALERT = ("ssl://127.0.0.1:9094/bootstrap: Receive failed: error:0A000412:SSL routines::"
              "ssl/tls alert bad certificate: SSL alert number 42 (after 1ms in state "
              "APIVERSION_QUERY)")
MTLS = KafkaSecurity(protocol="SSL", cert_file="client.crt", key_file="client.key")
OAUTH = KafkaSecurity(protocol="SASL_SSL", mechanism="OAUTHBEARER", oauth_provider="oidc")


@pytest.mark.parametrize(("security", "code", "text", "cause"), [
    (MTLS, "_TRANSPORT", CERT_ALERT,
     "TLS refused, the broker does not accept the client certificate (alert bad certificate; "
     "check CRONSTREAM_KAFKA_CERT_FILE"),
    (KafkaSecurity(protocol="SSL"), "_TRANSPORT", CERT_ALERT,
     "TLS refused, the broker requires a client certificate (mutual TLS; set "
     "CRONSTREAM_KAFKA_CERT_FILE"),
    (OAUTH, "_AUTHENTICATION", "Failed to acquire SASL OAUTHBEARER token: "
     '{"error":"invalid_client"}', "no OAUTHBEARER token (the token endpoint refused or did not "
     "answer: check CRONSTREAM_KAFKA_OAUTH_TOKEN_URL, _CLIENT_ID and _CLIENT_SECRET)"),
    (OAUTH, "_AUTHENTICATION", "sasl_ssl://127.0.0.1:9095/bootstrap: SASL authentication error: "
     '{"status":"insufficient_scope", "scope":"[cronstream]"} (after 308ms in state AUTH_REQ)',
     "the broker refused the OAUTHBEARER token (check CRONSTREAM_KAFKA_OAUTH_PROVIDER, _SCOPE"),
    (KafkaSecurity(protocol="SASL_SSL", mechanism="SCRAM-SHA-512"), "_AUTHENTICATION",
     "sasl_ssl://127.0.0.1:9095/bootstrap: SASL SCRAM-SHA-512 mechanism handshake failed: "
     "Broker: Unsupported SASL mechanism: broker's supported mechanisms: OAUTHBEARER",
     "the broker does not offer SASL SCRAM-SHA-512 on this listener (check "
     "CRONSTREAM_KAFKA_SASL_MECHANISM"),
])
def test_the_cause_is_said_in_the_terms_of_the_way_the_client_authenticates(
        security: KafkaSecurity, code: str, text: str, cause: str) -> None:
    """A refused client certificate is not the broker's untrusted one, and a refused token is
    not a wrong password: each line names the settings of the client's own way in."""
    from confluent_kafka import KafkaError

    from streams.runtime.admin import diagnose

    said = diagnose(KafkaError(getattr(KafkaError, code), text), "127.0.0.1:9094", security)
    assert said is not None and said.startswith(
        f"kafka at 127.0.0.1:9094 ({security.describe()}): {cause}"), said
    assert said.endswith(text)


def test_a_broker_not_up_yet_is_not_a_configuration_error() -> None:
    from confluent_kafka import KafkaError

    from streams.runtime.admin import diagnose

    refused = KafkaError(KafkaError._TRANSPORT, "127.0.0.1:9093/bootstrap: Connect to "
                         "ipv4#127.0.0.1:9093 failed: Connection refused (after 0ms in state CONNECT)")
    assert diagnose(refused, "127.0.0.1:9093") is None
    assert diagnose(None, "127.0.0.1:9093") is None


@pytest.fixture()
def client_pair(tmp_path: Path) -> tuple[str, str]:
    cert, key = tmp_path / "client.crt", tmp_path / "client.key"
    cert.write_text("-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n")
    key.write_text("-----BEGIN PRIVATE KEY-----\nBBB\n-----END PRIVATE KEY-----\n")
    return str(cert), str(key)


def test_mutual_tls_reaches_librdkafka_and_java(ca_file: str, client_pair: tuple[str, str]
                                                ) -> None:
    cert, key = client_pair
    env = {"CRONSTREAM_KAFKA_SECURITY_PROTOCOL": "SSL", "CRONSTREAM_KAFKA_CA_FILE": ca_file,
           "CRONSTREAM_KAFKA_CERT_FILE": cert, "CRONSTREAM_KAFKA_KEY_FILE": key,
           "CRONSTREAM_KAFKA_SSL_KEY_PASSWORD": "kpw"}
    assert client_config("b:1", env=env) == {
        "bootstrap.servers": "b:1", "security.protocol": "ssl", "ssl.ca.location": ca_file,
        "ssl.certificate.location": cert, "ssl.key.location": key, "ssl.key.password": "kpw"}
    lines = KafkaSecurity.from_env(env).java_properties("producer.")
    assert "producer.ssl.keystore.type=PEM" in lines
    assert ("producer.ssl.keystore.certificate.chain=-----BEGIN CERTIFICATE-----\\nAAA\\n"
            "-----END CERTIFICATE-----") in lines
    assert "producer.ssl.keystore.key=-----BEGIN PRIVATE KEY-----\\nBBB\\n-----END PRIVATE KEY-----" \
        in lines
    assert "producer.ssl.key.password=kpw" in lines


def test_a_certificate_without_its_key_or_without_tls_is_refused(client_pair: tuple[str, str]
                                                                 ) -> None:
    cert, _ = client_pair
    with pytest.raises(KafkaConfigError, match="CERT_FILE and CRONSTREAM_KAFKA_KEY_FILE go together"):
        KafkaSecurity.from_env({"CRONSTREAM_KAFKA_SECURITY_PROTOCOL": "SSL",
                                "CRONSTREAM_KAFKA_CERT_FILE": cert})
    with pytest.raises(KafkaConfigError, match="uses no TLS"):
        KafkaSecurity.from_env({"CRONSTREAM_KAFKA_CERT_FILE": cert,
                                "CRONSTREAM_KAFKA_KEY_FILE": cert})


OIDC = {"CRONSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "CRONSTREAM_KAFKA_SASL_MECHANISM": "OAUTHBEARER",
        "CRONSTREAM_KAFKA_OAUTH_TOKEN_URL": "https://idp.example.com/token",
        "CRONSTREAM_KAFKA_OAUTH_CLIENT_ID": "cron", "CRONSTREAM_KAFKA_OAUTH_CLIENT_SECRET": "cs",
        "CRONSTREAM_KAFKA_OAUTH_SCOPE": "kafka"}


def test_oauthbearer_oidc_reaches_librdkafka_java_and_faust() -> None:
    import faust

    config = client_config("b:1", env=OIDC)
    assert {k: v for k, v in config.items() if k.startswith("sasl")} == {
        "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example.com/token",
        "sasl.oauthbearer.client.id": "cron", "sasl.oauthbearer.client.secret": "cs",
        "sasl.oauthbearer.scope": "kafka"}
    lines = KafkaSecurity.from_env(OIDC).java_properties()
    assert "sasl.oauthbearer.token.endpoint.url=https://idp.example.com/token" in lines
    assert any(line.endswith('OAuthBearerLoginModule required clientId="cron" clientSecret="cs" '
                             'scope="kafka";') for line in lines)
    creds = KafkaSecurity.from_env(OIDC).faust()["broker_credentials"]
    assert isinstance(creds, faust.OAuthCredentials) and creds.ssl_context is not None
    with pytest.raises(KafkaConfigError, match="TOKEN_URL, _CLIENT_ID and _CLIENT_SECRET"):
        KafkaSecurity.from_env({**OIDC, "CRONSTREAM_KAFKA_OAUTH_CLIENT_SECRET": ""})


def test_oauthbearer_unsecured_makes_the_jwt_kafkas_default_validator_reads() -> None:
    import asyncio
    import base64
    import json

    from aiokafka.abc import AbstractTokenProvider

    env = {**OIDC, "CRONSTREAM_KAFKA_OAUTH_PROVIDER": "unsecured",
           "CRONSTREAM_KAFKA_SASL_USERNAME": "cronstream"}
    security = KafkaSecurity.from_env(env)
    token, expiry = client_config("b:1", env=env)["oauth_cb"]("")
    header, claims, signature = token.split(".")
    decoded = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "none"}
    assert signature == "" and decoded["sub"] == "cronstream" and decoded["exp"] == expiry
    assert decoded["exp"] > decoded["iat"] and decoded["scope"] == ["kafka"]
    creds = security.faust()["broker_credentials"]
    assert asyncio.run(creds.oauth_cb.token()).split(".")[0] == header
    # aiokafka refuses any other token provider when it connects (aiokafka/conn.py)
    assert isinstance(creds.oauth_cb, AbstractTokenProvider)
    assert security.java_properties()[-1].endswith(
        'unsecuredLoginStringClaim_sub="cronstream" unsecuredLoginListClaim_scope=" kafka";')


def test_msk_iam_names_the_package_it_needs_or_maps_to_amazons_handler() -> None:
    env = {**OIDC, "CRONSTREAM_KAFKA_OAUTH_PROVIDER": "aws-msk-iam", "AWS_REGION": "eu-west-1"}
    try:
        import aws_msk_iam_sasl_signer  # noqa: F401
    except ImportError:
        with pytest.raises(KafkaConfigError, match="aws-msk-iam-sasl-signer-python"):
            KafkaSecurity.from_env(env)
        return
    lines = KafkaSecurity.from_env(env).java_properties()
    assert any("IAMOAuthBearerLoginCallbackHandler" in line for line in lines)
def test_plain_without_tls_is_refused_naming_both_settings():
    env = {"CRONSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
           "CRONSTREAM_KAFKA_SASL_MECHANISM": "PLAIN", "CRONSTREAM_KAFKA_SASL_USERNAME": "u",
           "CRONSTREAM_KAFKA_SASL_PASSWORD": "p"}
    with pytest.raises(SystemExit, match="PLAIN sends the password in clear over SASL_PLAINTEXT"):
        KafkaSecurity.from_env(env)
    assert KafkaSecurity.from_env({**env, "CRONSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}).sasl
    assert KafkaSecurity.from_env({**env, "CRONSTREAM_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512"}).sasl
