"""The CLI reads a secure home's Kafka client settings itself (``Stack.home_client_env``,
``cli.main.adopt_home_settings``): no ``secure/client.env`` to source by hand; what the
environment sets wins, even empty; another cluster gets none of them; no secret is printed."""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path

import pytest

from cli import main
from stack.local import Stack, record_brokers
from streams.runtime import settings

PASSWORD = "home-password-46"


def secure_home(tmp_path: Path, brokers: int = 1) -> Stack:
    """A home as ``stack up --secure`` leaves it, as far as a client reads it (no broker)."""
    stack = Stack(replace(settings.load(), home=tmp_path, kafka_port=29092, host="127.0.0.1"))
    (tmp_path / "kafka").mkdir()
    (tmp_path / "kafka" / "secure").write_text("SASL_SSL\n")
    record_brokers(tmp_path, brokers, [stack.node_ports(n)[0] for n in range(1, brokers + 1)])
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "kafka-cronstream.password").write_text(PASSWORD)
    (tmp_path / "secure").mkdir()
    (tmp_path / "secure" / "ca.pem").write_text("a CA\n")
    return stack


@pytest.fixture(autouse=True)
def own_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test's environment is its own: what the CLI adopts leaves with the test."""
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items()
                                        if not k.startswith("CRONSTREAM_KAFKA_")
                                        and k != "CRONSTREAM_BOOTSTRAP"})


def test_a_plaintext_home_gives_nothing(tmp_path: Path) -> None:
    assert Stack(replace(settings.load(), home=tmp_path)).home_client_env() == {}


def test_a_secure_home_gives_its_clients_way_in(tmp_path: Path) -> None:
    stack = secure_home(tmp_path)
    assert stack.home_client_env() == {
        "CRONSTREAM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "CRONSTREAM_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "CRONSTREAM_KAFKA_SASL_USERNAME": "cronstream",
        "CRONSTREAM_KAFKA_SASL_PASSWORD": PASSWORD,
        "CRONSTREAM_KAFKA_CA_FILE": str(tmp_path / "secure" / "ca.pem")}
    (tmp_path / "kafka" / "client-auth").write_text("mtls\n")  # stack up --kafka-auth mtls
    assert stack.home_client_env()["CRONSTREAM_BOOTSTRAP"] == "127.0.0.1:29142"


def test_a_bootstrap_of_the_homes_listener_gets_that_listeners_way_in(tmp_path: Path) -> None:
    stack = secure_home(tmp_path, brokers=3)
    node2 = stack.node_ports(2)[0]
    mtls = stack.home_client_env(f"127.0.0.1:{29092 + 50},127.0.0.1:{node2 + 50}")
    assert mtls["CRONSTREAM_KAFKA_SECURITY_PROTOCOL"] == "SSL"
    assert mtls["CRONSTREAM_KAFKA_CERT_FILE"] == str(tmp_path / "secure" / "client.crt")
    assert "CRONSTREAM_BOOTSTRAP" not in mtls  # the one given stays
    assert stack.home_client_env(f"127.0.0.1:{node2}")["CRONSTREAM_KAFKA_SASL_USERNAME"] == \
        "cronstream"
    # another cluster's brokers, or only some of them this stack's: none of its settings
    assert stack.home_client_env("kafka.example.com:9093") == {}
    assert stack.home_client_env("127.0.0.1:29092,kafka.example.com:9093") == {}


def test_a_way_the_environment_speaks_gets_that_ways_settings(tmp_path: Path) -> None:
    """The stack's clients on OAUTHBEARER, the caller given SCRAM's protocol: it gets SCRAM's
    user and CA, not the OAUTHBEARER listener as its bootstrap."""
    stack = secure_home(tmp_path)
    (tmp_path / "kafka" / "client-auth").write_text("oauth\n")
    scram = stack.home_client_env(None, "SASL_SSL", "SCRAM-SHA-512")
    assert "CRONSTREAM_BOOTSTRAP" not in scram and scram["CRONSTREAM_KAFKA_SASL_USERNAME"] == \
        "cronstream"
    assert stack.home_client_env(None, "ssl")["CRONSTREAM_BOOTSTRAP"] == "127.0.0.1:29142"
    assert stack.home_client_env(None, "PLAINTEXT") == {}
    assert stack.home_client_env()["CRONSTREAM_KAFKA_SASL_MECHANISM"] == "OAUTHBEARER"


def test_three_brokers_are_every_clients_bootstrap(tmp_path: Path) -> None:
    stack = Stack(replace(settings.load(), home=tmp_path, kafka_port=29092))
    record_brokers(tmp_path, 3, [stack.node_ports(n)[0] for n in (1, 2, 3)])
    assert stack.s.bootstrap == "127.0.0.1:29092,127.0.0.1:29192,127.0.0.1:29194"


def test_what_the_environment_sets_wins_even_empty(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    secure_home(tmp_path)
    monkeypatch.setenv("CRONSTREAM_HOME", str(tmp_path))
    monkeypatch.setenv("CRONSTREAM_KAFKA_PORT", "29092")
    monkeypatch.setenv("CRONSTREAM_KAFKA_SASL_PASSWORD", "given")
    monkeypatch.setenv("CRONSTREAM_KAFKA_CA_FILE", "")
    adopted = main.adopt_home_settings(argparse.Namespace())
    assert adopted == ["CRONSTREAM_KAFKA_SASL_MECHANISM", "CRONSTREAM_KAFKA_SASL_USERNAME",
                       "CRONSTREAM_KAFKA_SECURITY_PROTOCOL"]
    assert os.environ["CRONSTREAM_KAFKA_SASL_PASSWORD"] == "given"
    assert os.environ["CRONSTREAM_KAFKA_CA_FILE"] == ""


def test_another_cluster_named_gets_none_of_the_homes_settings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secure_home(tmp_path)
    monkeypatch.setenv("CRONSTREAM_HOME", str(tmp_path))
    monkeypatch.setenv("CRONSTREAM_KAFKA_PORT", "29092")
    assert main.adopt_home_settings(argparse.Namespace(bootstrap="10.1.1.1:9092")) == []
    monkeypatch.setenv("CRONSTREAM_BOOTSTRAP", "10.1.1.1:9092")
    assert main.adopt_home_settings(argparse.Namespace()) == []


def test_config_check_says_where_each_came_from_and_masks_the_secret(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    secure_home(tmp_path)
    monkeypatch.setenv("CRONSTREAM_HOME", str(tmp_path))
    monkeypatch.setenv("CRONSTREAM_KAFKA_PORT", "29092")
    monkeypatch.setenv("CRONSTREAM_UNSUBSCRIBE_SECRET", "0123456789abcdef0")
    monkeypatch.setenv("CRONSTREAM_SES_ENDPOINT", "http://127.0.0.1:9")
    assert main.main(["config", "check"]) == 0
    out = capsys.readouterr()
    rows = {line.split()[0]: line for line in out.out.splitlines()}
    assert rows["CRONSTREAM_KAFKA_SECURITY_PROTOCOL"].endswith("SASL_SSL  [home]")
    assert rows["CRONSTREAM_KAFKA_SASL_PASSWORD"].endswith("****  [home]")
    assert PASSWORD not in out.out + out.err
