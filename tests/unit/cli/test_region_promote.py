"""``cronstream region promote --to``: a name no region can have, or a region the local
two-region stack does not have, is a one-line usage error before the authority is reached (a
promotion to it would depose the active region with nothing to take over)."""

from __future__ import annotations

import argparse

import pytest

from cli import main, operate
from cli.failures import USAGE, CliError


@pytest.mark.parametrize("name", ["B", "b ", "", "eu_west", "x" * 33])
def test_a_name_no_region_can_have_is_refused_naming_the_flag(
        name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main.main(["region", "promote", "--to", name])
    assert exited.value.code == USAGE
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --to: " in said and "is not a region name" in said


def test_a_region_the_local_stack_lacks_is_refused_before_the_authority(monkeypatch) -> None:
    monkeypatch.setattr(operate, "_local_site", lambda workers: object())
    monkeypatch.setattr(operate, "_authority", lambda: pytest.fail("the authority was reached"))
    args = argparse.Namespace(to="c", workers=1, unplanned=True, standby=None, wait=1.0,
                              json=False)
    with pytest.raises(CliError) as refused:
        operate.region_promote(args)
    assert refused.value.code == USAGE
    assert "--to 'c'" in str(refused.value) and "a and b" in str(refused.value)


def test_a_valid_name_is_kept() -> None:
    parsed = main.build_parser().parse_args(["region", "promote", "--to", "eu-west-1"])
    assert parsed.to == "eu-west-1"
