"""The CLI's exit codes and the one line of each failure (``cli.failures``), from the client
libraries' own errors; ``main`` never lets a traceback out unless asked (issue 46)."""

from __future__ import annotations

import argparse

import httpx
import psycopg
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError
from confluent_kafka import KafkaError, KafkaException

from cli import failures, main
from cli.failures import DENIED, EXITS, FAILED, OK, UNREACHABLE, USAGE, CliError
from streams.runtime.admin import KafkaUnreachable, unreachable
from streams.runtime.kafka_config import KafkaSecurity
from streams.runtime.settings import REPO_ROOT, SettingsError

PG = {"host": "10.0.0.2", "port": "5432", "user": "cronstream", "dbname": "cronstream",
      "sslmode": "verify-full", "password": "s3cret-pg"}


def test_the_exit_codes_are_defined_once_and_documented() -> None:
    assert [e.code for e in EXITS] == [OK, FAILED, USAGE, UNREACHABLE, DENIED] == [0, 1, 2, 3, 4]
    operations = (REPO_ROOT / "docs" / "operations.md").read_text()
    assert failures.markdown_table() in operations


# what libpq said (psycopg's OperationalError), first line and its hint
@pytest.mark.parametrize(("said", "code", "cause"), [
    ('connection failed: connection to server at "10.0.0.2", port 5432 failed: Connection '
     'refused\n\tIs the server running on that host and accepting TCP/IP connections?',
     UNREACHABLE, "connection refused: nothing listens there"),
    ('connection failed: connection to server at "10.0.0.2", port 5432 failed: FATAL:  password '
     'authentication failed for user "cronstream"', DENIED, "authentication failed or refused"),
    ('connection failed: connection to server at "10.0.0.2", port 5432 failed: SSL error: '
     'certificate verify failed', DENIED, "TLS failed"),
    ('connection failed: connection to server at "10.0.0.2", port 5432 failed: timeout expired',
     UNREACHABLE, "timed out"),
])
def test_postgresql_failures_name_the_address_the_tls_mode_and_the_cause(
        said: str, code: int, cause: str) -> None:
    failure = failures.postgres_failure(PG, psycopg.OperationalError(said))
    line = str(failure)
    assert failure.code == code
    assert line.startswith("postgresql at 10.0.0.2:5432 (sslmode verify-full, user cronstream, "
                           f"database cronstream): {cause}"), line
    assert "\n" not in line and "Is the server running" not in line
    assert "s3cret-pg" not in line


@pytest.mark.parametrize(("error", "code", "cause"), [
    (httpx.ConnectError("[Errno 111] Connection refused"), UNREACHABLE,
     "connection refused: nothing listens there"),
    (httpx.ConnectTimeout("timed out"), UNREACHABLE, "timed out"),
    (httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to "
                        "get local issuer certificate (_ssl.c:1006)"), DENIED,
     "TLS handshake failed"),
    (httpx.ConnectError("[Errno -2] Name or service not known"), UNREACHABLE,
     "the host name does not resolve"),
])
def test_http_failures_name_the_service_its_url_and_the_cause(
        error: httpx.TransportError, code: int, cause: str) -> None:
    failure = failures.http_failure("Kafka Connect", "http://10.0.0.3:8083", error, "next")
    assert failure.code == code
    assert str(failure).startswith(f"Kafka Connect at http://10.0.0.3:8083: {cause}"), failure


def test_ses_failures_tell_settings_denial_and_silence_apart() -> None:
    refused = EndpointConnectionError(endpoint_url="http://127.0.0.1:1/v2",
                                      error=ConnectionRefusedError(111, "Connection refused"))
    assert failures.ses_failure("x", refused).code == UNREACHABLE
    assert "connection refused" in str(failures.ses_failure("x", refused))
    assert failures.ses_failure("x", NoCredentialsError()).code == USAGE

    def client_error(code: str) -> ClientError:
        return ClientError({"Error": {"Code": code, "Message": "no"}}, "CreateConfigurationSet")

    assert failures.ses_failure("x", client_error("SignatureDoesNotMatch")).code == DENIED
    assert failures.ses_failure("x", client_error("LimitExceededException")).code == FAILED


@pytest.mark.parametrize(("error", "code"), [
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, DENIED),
    (KafkaError._TRANSPORT, UNREACHABLE),
    (KafkaError._TIMED_OUT, UNREACHABLE),
    (KafkaError.POLICY_VIOLATION, FAILED),
])
def test_a_kafka_error_once_connected_is_named_with_the_way_in(error: int, code: int,
                                                               monkeypatch) -> None:
    monkeypatch.delenv("CRONSTREAM_KAFKA_SECURITY_PROTOCOL", raising=False)
    failure = failures.kafka_failure("10.0.0.4:9092", KafkaException(KafkaError(error)))
    assert failure.code == code
    assert str(failure).startswith("kafka at 10.0.0.4:9092 (PLAINTEXT): "), failure


def test_explain_maps_each_kind_of_failure_to_its_code() -> None:
    assert failures.explain(KafkaUnreachable("kafka at x (PLAINTEXT): refused")).code == UNREACHABLE
    assert failures.explain(KafkaUnreachable("kafka at x: SASL", denied=True)).code == DENIED
    assert failures.explain(SettingsError("CRONSTREAM_PG_PORT='x' is not an integer")).code == USAGE
    assert failures.explain(CliError("given", 2)).code == 2
    assert failures.explain(SystemExit(0)) is None  # an exit code is not a failure's line
    assert failures.explain(ZeroDivisionError("x")) is None


# -- Kafka: why no broker answered (streams.runtime.admin.unreachable) --------------------------------
REFUSED = ("127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection refused "
           "(after 0ms in state CONNECT)")
NO_NAME = ("kafka.invalid:9092/bootstrap: Failed to resolve 'kafka.invalid:9092': Name or service "
           "not known (after 1ms in state CONNECT)")


@pytest.mark.parametrize(("texts", "cause"), [
    ([REFUSED], "connection refused: nothing listens there"),
    ([NO_NAME], "the host name does not resolve"),
    ([], "timed out, no broker answered within 10s"),
    (["Failed to get metadata: Local: Broker transport failure"],
     "timed out, no broker answered within 10s"),
])
def test_no_broker_is_said_as_refused_unresolved_or_timed_out(texts: list[str], cause: str) -> None:
    security = KafkaSecurity(protocol="SASL_SSL", mechanism="SCRAM-SHA-512", username="u",
                             password="p")
    line = unreachable(texts, "h:9092", security, 10)
    assert line.startswith(f"kafka at h:9092 (SASL_SSL, SCRAM-SHA-512): {cause}"), line


def test_the_way_in_is_named_never_a_secret() -> None:
    assert KafkaSecurity().describe() == "PLAINTEXT"
    assert KafkaSecurity(protocol="SSL", cert_file="c", key_file="k").describe() == \
        "SSL, client certificate"
    assert KafkaSecurity(protocol="SASL_SSL", mechanism="OAUTHBEARER", oauth_provider="oidc",
                         client_secret="s3cret").describe() == "SASL_SSL, OAUTHBEARER (oidc)"
    assert "pw" not in KafkaSecurity(protocol="SASL_SSL", mechanism="PLAIN", username="u",
                                     password="pw").describe()


# -- main: one line, never a traceback -----------------------------------------------------------------
def broken(_args: argparse.Namespace) -> int:
    raise ZeroDivisionError("a bug")


def test_an_unexpected_failure_is_one_line_and_its_traceback_only_when_asked(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(main.operate, "topology", broken)
    assert main.main(["topology"]) == FAILED
    said = capsys.readouterr()
    assert said.err.strip().splitlines() == [
        "cronstream topology: unexpected ZeroDivisionError: a bug (--verbose shows where)"]
    assert main.main(["topology", "--verbose"]) == FAILED
    assert "Traceback" in capsys.readouterr().err
    assert main.main(["-v", "topology"]) == FAILED
    assert "Traceback" in capsys.readouterr().err


def test_a_settings_problem_is_usage_and_named(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CRONSTREAM_KAFKA_SECURITY_PROTOCOL", "TLS")
    assert main.main(["lag"]) == USAGE
    err = capsys.readouterr().err
    assert err.startswith("cronstream lag: kafka: CRONSTREAM_KAFKA_SECURITY_PROTOCOL='TLS'"), err
    assert "Traceback" not in err


def test_librdkafkas_own_lines_are_kept_back_unless_verbose(monkeypatch: pytest.MonkeyPatch) -> None:
    from streams.runtime.kafka_config import client_config

    seen: list[object] = []

    def record(_args: argparse.Namespace) -> int:
        seen.append(client_config("b:1", env={}).get("log_level", "librdkafka's default"))
        return OK

    monkeypatch.setattr(main.operate, "topology", record)
    assert main.main(["topology"]) == main.main(["topology", "--verbose"]) == OK
    assert seen == [0, "librdkafka's default"]
    assert "log_level" not in client_config("b:1", env={})  # put back after the command
