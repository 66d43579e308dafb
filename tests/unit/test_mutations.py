"""The mutation check's table and runner (``tests/mutations``): every guarantee of the README's
table has a mutation, every mutation's anchor is in the code exactly once (a refactor that moves a
mechanism fails here, on every ``./dev test``, until its row is anchored again), its tests exist,
and the runner refuses a drifted anchor and reads pytest's report."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.mutations.__main__ import Drifted, applied, failing_lines, mutate
from tests.mutations.table import MUTATIONS, Edit, Mutation
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
        for edit in mutation.edits:
            source = (ROOT / edit.path).read_text()
            assert source.count(edit.anchor) == 1, (mutation.name, edit.path)
            assert applied(source, edit) != source


def test_a_mutation_makes_every_edit_in_the_copy_and_none_in_the_tree(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\ny = 1\n")
    (tmp_path / "b.py").write_text("z = 1\n")
    mutate(tmp_path, Mutation("m", "g", (Edit("a.py", "x = 1\n", "x = 2\n"),
                                        Edit("a.py", "y = 1\n", "y = 2\n"),
                                        Edit("b.py", "z = 1\n", "z = 2\n")), ("t",), ""))
    assert (tmp_path / "a.py").read_text() == "x = 2\ny = 2\n"
    assert (tmp_path / "b.py").read_text() == "z = 2\n"
    with pytest.raises(Drifted):
        mutate(tmp_path, Mutation("m", "g", (Edit("b.py", "z = 2\n", "z = 3\n"),
                                            Edit("a.py", "nowhere", "")), ("t",), ""))
    assert (tmp_path / "b.py").read_text() == "z = 2\n", "a drifted mutation edits nothing"


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
    edit = Edit("f.py", "x = 1\n", "x = 2\n")
    assert applied("a\nx = 1\nb\n", edit) == "a\nx = 2\nb\n"
    with pytest.raises(Drifted, match="found 0 times"):
        applied("a\nb\n", edit)
    with pytest.raises(Drifted, match="found 2 times"):
        applied("x = 1\nx = 1\n", edit)


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
