"""Names that explain themselves: no two modules of cronstream's code differ only by a suffix.

Pairs such as ``walker.py``/``walkers.py``, ``feedback.py``/``feedback_agent.py`` or
``views.py``/``view_stores.py`` made a newcomer open both to learn which one they wanted
(issue 41). A module named after an outside service (``adapters/ses.py``, ``adapters/sns.py``)
may lend its name as a prefix: ``ses_events.py`` says which SES thing it is, ``sms_text.py``
which SMS thing."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("api", "cli", "ops", "stack", "streams")
SERVICES = {"ses", "sns", "sms"}  # outside services: their names prefix the modules about them


def module_names() -> dict[str, list[str]]:
    names: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if path.name != "__init__.py":
                names.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    return names


def suffix_pairs(names: set[str]) -> list[tuple[str, str]]:
    """(short, long) pairs where ``long`` is ``short`` plus ``s`` or plus ``_`` and more."""
    return sorted((short, long) for short in names for long in names
                  if short not in SERVICES and long != short and long.startswith(short)
                  and long[len(short)] in "s_")


def test_no_two_modules_differ_only_by_a_suffix() -> None:
    names = module_names()
    found = [f"{names[short]} / {names[long]}" for short, long in suffix_pairs(set(names))]
    assert found == []


def test_the_pairs_issue_41_named_would_be_found() -> None:
    assert suffix_pairs({"walker", "walkers", "feedback", "feedback_agent", "views",
                         "ses", "ses_events"}) == [("feedback", "feedback_agent"),
                                                   ("walker", "walkers")]
