"""The README stays a front door and every doc stays true to the repository.

What is checked, and why each: the README's size (issue 27: a newcomer reads it in one sitting,
history belongs in docs/); that it opens with the two commands; that every relative link and
``#anchor`` in README.md and docs/*.md lands on a file and a heading (docs were split and moved,
and a link that breaks says nothing until someone clicks it); that every repository path, test
function and ``streams.`` module named in backticks exists (the guarantees table names the module
and the test behind each guarantee: a rename must not leave it pointing at nothing); and that
docs/architecture.md names every module and every processor (it is the map of the packages).
"""

from __future__ import annotations

import ast
import re
import unicodedata
from pathlib import Path

import pytest

from streams.topology import PROCESSORS

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MARKDOWN = [README, *DOCS]
README_MAX_BYTES = 12 * 1024

FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]+`")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
# a repository path in backticks: a top-level folder of this repo, then a file with an extension
REPO_PATH = re.compile(r"^((?:streams|api|cli|ops|stack|bench|tests|connectors|schemas|docs)/[\w./-]+\.\w+)"
                       r"(?:::(\w+))?$")
MODULE_REF = re.compile(r"^streams(?:\.\w+)+$")


def prose(text: str) -> str:
    """The text without fenced code blocks, where links and paths are examples, not references."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, inline markup and punctuation dropped, spaces to
    hyphens (letters, digits, ``_`` and ``-`` kept, non-ASCII letters included)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.replace("`", "").lower()
    kept = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a markdown file, with GitHub's ``-1``, ``-2`` for repeats."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(prose(path.read_text())):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def broken_links(path: Path) -> list[str]:
    """The relative links of a markdown file that land on no file, or on no heading of it."""
    broken = []
    for target in LINK.findall(prose(path.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not ours to check
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target} (no file {shown(dest)})")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {shown(dest)})")
    return broken


def code_spans(path: Path) -> list[str]:
    return [span.strip("`") for span in CODE_SPAN.findall(prose(path.read_text()))]


def defined_names(source: Path) -> set[str]:
    """Top-level functions, classes and assignments of a module (a test function, a constant)."""
    names: set[str] = set()
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def missing_references(path: Path) -> list[str]:
    """Repository paths, ``path::function`` and ``streams.`` modules named in backticks that do
    not exist."""
    missing = []
    for span in code_spans(path):
        if found := REPO_PATH.match(span):
            file, name = found.groups()
            if not (ROOT / file).is_file() or (name and name not in defined_names(ROOT / file)):
                missing.append(span)
        elif MODULE_REF.match(span):
            parts = span.split(".")
            # the longest prefix that is a module; what follows, at most one name defined in it
            for cut in range(len(parts), 0, -1):
                module = ROOT.joinpath(*parts[:cut]).with_suffix(".py")
                package = ROOT.joinpath(*parts[:cut], "__init__.py")
                if module.is_file() or package.is_file():
                    rest = parts[cut:]
                    source = module if module.is_file() else package
                    if len(rest) > 2 or (rest and rest[0] not in defined_names(source)):
                        missing.append(span)
                    break
            else:
                missing.append(span)
    return missing


def test_the_readme_is_a_front_door_of_at_most_12_kib():
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; move detail to docs/"


def test_the_readme_opens_with_the_two_commands():
    opening = README.read_text().splitlines()[:6]
    assert any(line.startswith("./dev demo") for line in opening)
    assert any(line.startswith("./dev test") for line in opening)


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_lands_on_a_file_and_heading(path):
    assert broken_links(path) == []


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_test_and_module_named_exists(path):
    assert missing_references(path) == []


def test_the_readme_links_every_doc():
    linked = {(README.parent / target.partition("#")[0]).resolve()
              for target in LINK.findall(prose(README.read_text()))}
    assert [doc.name for doc in DOCS if doc.resolve() not in linked] == []


def test_the_architecture_doc_names_every_module_and_processor():
    text = (ROOT / "docs" / "architecture.md").read_text()
    modules = [p.relative_to(ROOT / "streams") for p in (ROOT / "streams").rglob("*.py")
               if p.name != "__init__.py"]
    spans = set(code_spans(ROOT / "docs" / "architecture.md"))
    assert [str(m) for m in modules if not {m.name, str(m), f"streams/{m}"} & spans] == []
    assert [p.name for p in PROCESSORS if f"`{p.name}`" not in text] == []


def test_the_checks_catch_what_they_are_for(tmp_path):
    """The link, anchor and reference checks flag a broken one (they would pass vacuously if the
    patterns matched nothing)."""
    (tmp_path / "there.md").write_text("# A heading, with `code`\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md) [ok](there.md#a-heading-with-code) [file](gone.md)\n"
                    "[anchor](there.md#no-such-heading) [web](https://example.com/x)\n"
                    "```\n[in code](nowhere.md)\n```\n"
                    "`streams/topology.py` `streams/nowhere.py` `streams.topology.PROCESSORS`\n"
                    "`streams.topology.NOTHING` `tests/unit/test_docs.py::test_no_such_test`\n")
    assert [b.split(" ")[0] for b in broken_links(page)] == ["gone.md", "there.md#no-such-heading"]
    assert missing_references(page) == ["streams/nowhere.py", "streams.topology.NOTHING",
                                        "tests/unit/test_docs.py::test_no_such_test"]
