"""The tenant commands' limits (``cronstream tenant create|update``): a fires-per-second quota
below 1 is a one-line usage error naming the flag, before anything is reached or written."""

from __future__ import annotations

import pytest

from cli import main
from cli.failures import USAGE


@pytest.mark.parametrize("command", [["tenant", "create", "acme"], ["tenant", "update", "acme"]])
@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_a_fires_per_second_quota_below_one_is_refused_naming_the_flag(
        command: list[str], value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main.main([*command, f"--max-fires-per-s={value}"])
    assert exited.value.code == USAGE
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said.startswith("cronstream tenant ") and "argument --max-fires-per-s: " in said
    assert ("must be at least 1" if value != "many" else "is not a whole number") in said


def test_the_quota_is_parsed_for_create_and_left_unchanged_by_update_unless_given() -> None:
    parser = main.build_parser()
    assert parser.parse_args(["tenant", "create", "a1"]).max_fires_per_s == 10_000
    assert parser.parse_args(["tenant", "create", "a1", "--max-fires-per-s", "5"]
                             ).max_fires_per_s == 5
    assert parser.parse_args(["tenant", "update", "a1"]).max_fires_per_s is None


def test_sms_originations_are_granted_and_revoked_by_update(monkeypatch, capsys) -> None:
    from streams.adapters import tenants

    asked: dict = {}

    def update(bootstrap, name, *, partitions, **changes):
        asked.update(changes)
        current, _ = tenants.new_tenant(name, sms_originations=["+18005550100"])
        return tenants.granted(current, **changes)

    monkeypatch.setattr(tenants, "update", update)
    args = main.build_parser().parse_args(
        ["tenant", "update", "acme", "--sms-origination", "+1 800 555 0111",
         "--sms-origination", "account-default", "--revoke-sms-origination", "+18005550100"])
    assert main._tenant_update(args) == 0
    assert asked["grant_sms_originations"] == ["+1 800 555 0111", "account-default"]
    assert asked["revoke_sms_originations"] == ["+18005550100"]
    assert "sms originations +18005550111, account-default" in capsys.readouterr().out


def test_an_sms_origination_that_cannot_be_one_is_a_usage_error(monkeypatch) -> None:
    from cli.failures import CliError
    from streams.adapters import tenants

    monkeypatch.setattr(tenants, "write", lambda *a, **k: pytest.fail("written"))
    args = main.build_parser().parse_args(
        ["tenant", "create", "acme", "--sms-origination", "Acme Dental Care"])
    with pytest.raises(CliError, match="sms origination 'Acme Dental Care'") as raised:
        main._tenant(args)
    assert raised.value.code == USAGE
