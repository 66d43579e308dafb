"""Every endpoint, credential and bind address from settings (``streams.runtime.settings``):
PostgreSQL with a password and TLS, secrets from files, one line per problem naming the
variable, and ``cronstream config check`` with the secrets masked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cli.failures import USAGE
from cli.main import main as cli_main
from streams.runtime import settings
from streams.runtime.settings import SettingsError, effective, validate

SECRET = "s3cr3t-never-printed"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("CRONSTREAM_", "AWS_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CRONSTREAM_UNSUBSCRIBE_SECRET", "x" * 32)


def test_postgres_from_parts_with_password_and_tls(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    ca = tmp_path / "pg-ca.pem"
    ca.write_text("pem")
    monkeypatch.setenv("CRONSTREAM_PG_HOST", "db.internal")
    monkeypatch.setenv("CRONSTREAM_PG_PORT", "6432")
    monkeypatch.setenv("CRONSTREAM_PG_DATABASE", "cron")
    monkeypatch.setenv("CRONSTREAM_PG_USER", "app")
    monkeypatch.setenv("CRONSTREAM_PG_PASSWORD", SECRET)
    monkeypatch.setenv("CRONSTREAM_PG_SSLMODE", "verify-full")
    monkeypatch.setenv("CRONSTREAM_PG_SSLROOTCERT", str(ca))
    s = settings.load()
    assert s.pg_params == {"host": "db.internal", "port": "6432", "dbname": "cron", "user": "app",
                           "password": SECRET, "sslmode": "verify-full", "sslrootcert": str(ca)}
    assert s.pg_jdbc_url == (f"jdbc:postgresql://db.internal:6432/cron?sslmode=verify-full&"
                             f"sslrootcert={ca}&reWriteBatchedInserts=true")
    assert s.sink_pg_password == SECRET
    monkeypatch.setenv("CRONSTREAM_SINK_PG_PASSWORD", "${file:/etc/connect/pg.properties:pw}")
    assert s.sink_pg_password == "${file:/etc/connect/pg.properties:pw}"


def test_a_dsn_wins_and_a_bad_one_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONSTREAM_PG_DSN", "postgresql://u:pw@10.9.8.7:5433/d?sslmode=require")
    monkeypatch.setenv("CRONSTREAM_PG_HOST", "ignored")
    s = settings.load()
    assert s.pg_params["host"] == "10.9.8.7" and s.pg_params["password"] == "pw"
    assert s.pg_jdbc_url == ("jdbc:postgresql://10.9.8.7:5433/d?sslmode=require&"
                             "reWriteBatchedInserts=true")
    monkeypatch.setenv("CRONSTREAM_PG_DSN", "host=a port")
    with pytest.raises(SettingsError, match=r"^CRONSTREAM_PG_DSN is not a PostgreSQL"):
        _ = settings.load().pg_dsn
    monkeypatch.delenv("CRONSTREAM_PG_DSN")
    monkeypatch.setenv("CRONSTREAM_PG_SSLMODE", "sometimes")
    assert validate(settings.load(), "api")[0].startswith("CRONSTREAM_PG_SSLMODE='sometimes'")


def test_secrets_come_from_files_and_both_or_an_unreadable_file_is_refused(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # settings.load writes the file's secret into os.environ itself: its state before the test
    # recorded first (a delenv of an absent name records nothing), so the test leaves it as it
    # was (it leaked, and the suite's stack started later initialised PostgreSQL with it)
    monkeypatch.setenv("CRONSTREAM_PG_PASSWORD", "recorded")
    monkeypatch.delenv("CRONSTREAM_PG_PASSWORD")
    path = tmp_path / "pg-password"
    path.write_text(SECRET + "\n")
    monkeypatch.setenv("CRONSTREAM_PG_PASSWORD_FILE", str(path))
    assert settings.load().pg_params["password"] == SECRET
    assert os.environ["CRONSTREAM_PG_PASSWORD"] == SECRET  # every reader of the environment
    monkeypatch.setenv("CRONSTREAM_PG_PASSWORD", "another")
    with pytest.raises(SettingsError, match="CRONSTREAM_PG_PASSWORD and CRONSTREAM_PG_PASSWORD_FILE"):
        settings.load()
    monkeypatch.delenv("CRONSTREAM_PG_PASSWORD")
    monkeypatch.setenv("CRONSTREAM_KAFKA_SASL_PASSWORD_FILE", str(tmp_path / "missing"))
    with pytest.raises(SettingsError, match="CRONSTREAM_KAFKA_SASL_PASSWORD_FILE='.*missing'"):
        settings.load()


def test_a_worker_mailing_through_ses_with_a_loopback_link_base_does_not_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The unsubscribe links of a production campaign must not point at 127.0.0.1."""
    problems = validate(settings.load(), "worker")
    assert len(problems) == 1 and problems[0].startswith("CRONSTREAM_API_URL='http://127.0.0.1:")
    assert "AWS SES" in problems[0]
    monkeypatch.setenv("CRONSTREAM_SES_ENDPOINT", "http://127.0.0.1:18025")  # the local server
    assert validate(settings.load(), "worker") == []
    monkeypatch.delenv("CRONSTREAM_SES_ENDPOINT")
    monkeypatch.setenv("CRONSTREAM_API_URL", "https://cron.example.com")
    assert validate(settings.load(), "worker") == []
    with pytest.raises(SettingsError, match="^config: CRONSTREAM_UNSUBSCRIBE_SECRET"):
        monkeypatch.setenv("CRONSTREAM_UNSUBSCRIBE_SECRET", "short")
        settings.check_or_exit("worker")


def test_every_problem_is_one_line_naming_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONSTREAM_API_URL", "cron.example.com")
    monkeypatch.setenv("CRONSTREAM_API_HOST", "0.0.0.0; rm")
    monkeypatch.setenv("CRONSTREAM_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("CRONSTREAM_SES_MAX_RATE", "fast")
    problems = validate(settings.load(), "api")
    assert all("\n" not in p for p in problems)
    assert len(problems) == 4, problems
    for name in ("CRONSTREAM_API_URL=", "CRONSTREAM_API_HOST=", "CRONSTREAM_KAFKA_SASL_USERNAME",
                 "CRONSTREAM_SES_MAX_RATE="):
        assert any(name in p for p in problems), (name, problems)


def test_config_check_prints_the_effective_configuration_with_secrets_masked(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CRONSTREAM_PG_PASSWORD", SECRET)
    monkeypatch.setenv("CRONSTREAM_OPERATOR_KEY", SECRET)
    monkeypatch.setenv("CRONSTREAM_API_URL", "https://cron.example.com")
    assert cli_main(["config", "check"]) == 0
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err
    lines = {line.split()[0]: line for line in out.out.splitlines()}
    assert set(lines) == {s.name for s in settings.SETTINGS}
    assert "****" in lines["CRONSTREAM_PG_PASSWORD"] and "[environment]" in lines["CRONSTREAM_PG_PASSWORD"]
    assert "password=****" in lines["CRONSTREAM_PG_DSN"]
    assert "https://cron.example.com" in lines["CRONSTREAM_API_URL"]
    monkeypatch.setenv("CRONSTREAM_PG_SSLMODE", "nope")
    assert cli_main(["config", "check"]) == USAGE  # a setting that cannot work: fix it
    assert "config: CRONSTREAM_PG_SSLMODE='nope'" in capsys.readouterr().err


def test_every_secret_is_masked_in_the_table() -> None:
    secret_names = {s.name for s in settings.SETTINGS if s.secret}
    assert secret_names <= set(settings.SECRETS)
    rows = {name: value for name, value, _ in effective(settings.load())}
    assert all(rows[name] in ("****", "(not set)") for name in secret_names)


def test_a_region_and_its_lease_are_checked_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings.load().region is None  # one region: no authority asked
    assert settings.load().region_lease == (10.0, 2.0, 2.0)
    monkeypatch.setenv("CRONSTREAM_REGION", "eu west")
    monkeypatch.setenv("CRONSTREAM_REGION_MARGIN_S", "10")
    problems = validate(settings.load(), "worker")
    assert any(p.startswith("CRONSTREAM_REGION='eu west' is not") for p in problems), problems
    assert any("need 0 < margin < lease" in p for p in problems), problems
    monkeypatch.setenv("CRONSTREAM_REGION", "b")
    monkeypatch.setenv("CRONSTREAM_REGION_MARGIN_S", "2")
    monkeypatch.setenv("CRONSTREAM_AUTHORITY_DSN", f"host=db password={SECRET}")
    conf = settings.load()
    assert (conf.region, conf.authority_dsn) == ("b", f"host=db password={SECRET}")
    rows = {name: value for name, value, _ in effective(conf)}
    assert SECRET not in rows["CRONSTREAM_AUTHORITY_DSN"]


def test_the_group_session_is_checked_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings.load().group_session == (2.0, 0.5)
    monkeypatch.setenv("CRONSTREAM_GROUP_SESSION_TIMEOUT_S", "10")
    monkeypatch.setenv("CRONSTREAM_GROUP_HEARTBEAT_S", "2")
    assert settings.load().group_session == (10.0, 2.0)
    monkeypatch.setenv("CRONSTREAM_GROUP_HEARTBEAT_S", "4")  # more than a third of the session
    problems = validate(settings.load(), "worker")
    assert any(p.startswith("CRONSTREAM_GROUP_HEARTBEAT_S=4 is not in (0, 3.33333]")
               for p in problems), problems
    monkeypatch.setenv("CRONSTREAM_GROUP_SESSION_TIMEOUT_S", "0.5")
    problems = validate(settings.load(), "worker")
    assert any(p.startswith("CRONSTREAM_GROUP_SESSION_TIMEOUT_S=0.5 is not in [1, 300]")
               for p in problems), problems


def test_the_reconcilers_lag_is_a_setting_checked_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings.load().reconciler_lag_s == 120.0
    monkeypatch.setenv("CRONSTREAM_RECONCILER_LAG_S", "20")
    assert settings.load().reconciler_lag_s == 20.0
    monkeypatch.setenv("CRONSTREAM_RECONCILER_LAG_S", "1")  # would re-drive slots only queued
    problems = validate(settings.load(), "worker")
    assert "CRONSTREAM_RECONCILER_LAG_S=1 is not in [5, 3600]" in problems, problems
