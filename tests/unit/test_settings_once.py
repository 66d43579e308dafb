"""Settings are read once, in one place: ``streams/runtime/settings.py`` is the only reader of the
environment (issue 41, item 5).

The rule, checked on the source of every package (``cli``, ``api``, ``ops``, ``stack``,
``streams``, ``bench``; not the tests): outside settings.py no code names ``os.environ``,
``os.environb``, ``os.getenv``, ``os.putenv`` or ``os.unsetenv``, nor imports ``environ`` or
``getenv`` from ``os`` (a read through an alias is a read all the same). One use is allowed,
because it reads no setting: forwarding the environment whole to a child process, i.e.
``os.environ`` unpacked in a dict display (``{**os.environ, ...}``) or given to ``dict(os.environ,
...)``, where that mapping is the ``env=`` argument of a call or is assigned to a variable named
``env``. A value the code needs (a port, a secret, a default to fill in) is a ``Settings``
property, given to whoever needs it by the process that loaded the settings; a whole mapping to
interpret (Kafka's security settings) is ``settings.environment()``; a value to put into the
environment is ``settings.export``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cli", "api", "ops", "stack", "streams", "bench")
THE_READER = ROOT / "streams" / "runtime" / "settings.py"
ENV_ATTRS = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def _forwarded(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """``os.environ`` passed whole to a child's environment (the module docstring's rule)."""
    holder = parents.get(node)
    if isinstance(holder, ast.Dict) and any(k is None and v is node
                                            for k, v in zip(holder.keys, holder.values,
                                                            strict=True)):
        mapping: ast.AST = holder
    elif (isinstance(holder, ast.Call) and isinstance(holder.func, ast.Name)
          and holder.func.id == "dict" and holder.args and holder.args[0] is node):
        mapping = holder
    else:
        return False
    # the mapping may sit in a conditional (``{...} if env else None``)
    user = parents.get(mapping)
    while isinstance(user, ast.IfExp):
        mapping, user = user, parents.get(user)
    if isinstance(user, ast.keyword) and user.arg == "env":
        return True
    return (isinstance(user, ast.Assign) and len(user.targets) == 1
            and isinstance(user.targets[0], ast.Name) and user.targets[0].id == "env")


def environment_reads(source: str) -> list[tuple[int, str]]:
    """(line, what) of every use of the environment in ``source`` the rule forbids."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in ENV_ATTRS
                and isinstance(node.value, ast.Name) and node.value.id == "os"):
            if node.attr == "environ" and _forwarded(node, parents):
                continue
            found.append((node.lineno, f"os.{node.attr}"))
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [(node.lineno, f"from os import {a.name}") for a in node.names
                      if a.name in ENV_ATTRS]
    return sorted(found)


def offenders() -> list[str]:
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == THE_READER:
                continue
            for line, what in environment_reads(path.read_text()):
                out.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    return out


def test_only_settings_reads_the_environment() -> None:
    found = offenders()
    assert not found, ("the environment is read outside streams/runtime/settings.py (add a "
                       "Settings property and pass it down):\n" + "\n".join(found))


def test_the_rule_catches_reads_and_allows_forwarding() -> None:
    reads = environment_reads(
        "import os\n"
        "from os import environ\n"
        "a = os.environ.get('CRONSTREAM_PARTITIONS')\n"
        "b = os.environ['X']\n"
        "c = os.getenv('X')\n"
        "d = {**os.environ, 'X': '1'}\n"  # a read: not a child's environment
        "e = dict(os.environ)\n"
        "os.environ.update({'X': '1'})\n")
    assert sorted(line for line, _ in reads) == [2, 3, 4, 5, 6, 7, 8]
    assert environment_reads(
        "import os, subprocess\n"
        "subprocess.run(['x'], env={**os.environ, 'X': '1'})\n"
        "subprocess.run(['x'], env={**os.environ, **extra} if extra else None)\n"
        "env = dict(os.environ, DEBIAN_FRONTEND='noninteractive')\n") == []


def test_the_reader_itself_is_where_the_reads_are() -> None:
    assert environment_reads(THE_READER.read_text()), "settings.py should be the one reader"
