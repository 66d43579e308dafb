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
