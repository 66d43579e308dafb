"""The mutation check's table and runner (``tests/mutations``): every guarantee of the README's
table has a mutation, every mutation's anchor is in the code exactly once (a refactor that moves a
mechanism fails here, on every ``./dev test``, until its row is anchored again), its tests exist,
and the runner refuses a drifted anchor and reads pytest's report."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.mutations.__main__ import Drifted, applied, failing_lines
from tests.mutations.table import MUTATIONS, Mutation
from tests.unit.test_docs import defined_names

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| (?P<guarantee>[^|]+?) \|.*\| `(?P<mutation>[a-z0-9-]+)` \|$", re.M)


def readme_rows() -> dict[str, str]:
    """The README's guarantees table: each row's guarantee → the mutation it names."""
    text = (ROOT / "README.md").read_text()
    table = text[text.index("## Guarantees"):text.index("## Concepts")]
    return {m.group("guarantee"): m.group("mutation") for m in ROW.finditer(table)}


def test_every_anchor_is_in_the_code_exactly_once() -> None:
    for mutation in MUTATIONS:
        source = (ROOT / mutation.path).read_text()
        assert source.count(mutation.anchor) == 1, (mutation.name, mutation.path)
        assert applied(source, mutation) != source


def test_every_mutations_tests_exist_and_names_are_unique() -> None:
    assert len({m.name for m in MUTATIONS}) == len(MUTATIONS)
    for mutation in MUTATIONS:
        for node in mutation.tests:
            path, _, name = node.partition("::")
            assert name in defined_names(ROOT / path), (mutation.name, node)


def test_every_guarantee_of_the_readme_has_its_mutation() -> None:
    rows = readme_rows()
    assert len(rows) >= 14, rows
    by_name = {m.name: m for m in MUTATIONS}
    for guarantee, name in rows.items():
        assert name in by_name, (guarantee, name)
        assert by_name[name].guarantee == guarantee, (name, by_name[name].guarantee)
        readme_test = next(line for line in (ROOT / "README.md").read_text().splitlines()
                           if line.startswith(f"| {guarantee} |"))
        assert any(test.split("::")[0] in readme_test for test in by_name[name].tests), \
            f"{name}'s tests are not the README's test for {guarantee!r}"


def test_a_drifted_anchor_stops_the_run() -> None:
    mutation = Mutation("m", "g", "f.py", "x = 1\n", "x = 2\n", ("t",), "")
    assert applied("a\nx = 1\nb\n", mutation) == "a\nx = 2\nb\n"
    with pytest.raises(Drifted, match="found 0 times"):
        applied("a\nb\n", mutation)
    with pytest.raises(Drifted, match="found 2 times"):
        applied("x = 1\nx = 1\n", mutation)


def test_the_report_gives_each_failing_tests_first_line(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(
        '<?xml version="1.0"?><testsuites><testsuite>'
        '<testcase classname="tests.integration.test_x" name="test_a">'
        '<failure message="AssertionError: sent again&#10;assert 2 == 1">trace</failure></testcase>'
        '<testcase classname="tests.integration.test_x" name="test_b">'
        '<error message="fixture failed">trace</error></testcase>'
        '<testcase classname="tests.integration.test_x" name="test_c"/>'
        '</testsuite></testsuites>')
    failures, errors, passed = failing_lines(report)
    assert failures == {"tests/integration/test_x.py::test_a": "AssertionError: sent again"}
    assert errors == {"tests/integration/test_x.py::test_b": "fixture failed"}
    assert passed == 1
