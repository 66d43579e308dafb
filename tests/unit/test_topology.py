"""The declared graph (``streams.topology.PROCESSORS``) against what the code actually does.

The code is read with ``ast``: every ``@app.agent``/``@app.timer`` function, the topic each agent
consumes, every table a module creates and every topic passed to ``produce``/``send`` must be in
the declarations, so a new agent or topic cannot be added without appearing in the drawn graph.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ops import graph
from streams import topology
from streams.topology import PROCESSORS, TABLES, TOPICS

ROOT = Path(__file__).resolve().parents[2]
CODE = sorted((ROOT / "streams").rglob("*.py")) + sorted((ROOT / "api").rglob("*.py"))
SPECS = {name: getattr(topology, name) for name in dir(topology)
         if isinstance(getattr(topology, name), topology.TopicSpec | topology.TableSpec)}


def module_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def decorated(tree: ast.Module, decorator: str) -> dict[str, ast.expr | None]:
    """Functions decorated ``@app.<decorator>(...)``, at any depth (agents are registered inside
    each sub-topology's ``register``): name -> first decorator argument."""
    found: dict[str, ast.expr | None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef):
            for dec in node.decorator_list:
                if (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute)
                        and dec.func.attr == decorator):
                    found[node.name] = dec.args[0] if dec.args else None
    return found


def spec_calls(tree: ast.Module, factory: str) -> list[ast.Call]:
    """Calls ``<runtime>.topic(SPEC)`` / ``<runtime>.table(SPEC)`` anywhere in the module."""
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == factory and node.args and isinstance(node.args[0], ast.Name)
            and node.args[0].id in SPECS]


def raw_assignments(tree: ast.Module, factory: str) -> dict[str, str]:
    """``name = rt.topic(SPEC)`` at any depth: name -> SPEC."""
    calls = {id(call) for call in spec_calls(tree, factory)}
    return {node.targets[0].id: node.value.args[0].id  # type: ignore[attr-defined]
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and id(node.value) in calls
            and isinstance(node.targets[0], ast.Name)}


def produced_specs(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("produce", "send") and node.args
                and isinstance(node.args[0], ast.Name) and node.args[0].id in SPECS):
            names.add(node.args[0].id)
    return names


def by_name() -> dict[str, topology.ProcessorSpec]:
    return {p.name: p for p in PROCESSORS}


def test_every_agent_and_punctuator_is_declared_with_what_it_consumes():
    declared = by_name()
    seen = 0
    for path in CODE:
        tree = ast.parse(path.read_text())
        topics = raw_assignments(tree, "topic")
        for name, arg in decorated(tree, "agent").items():
            seen += 1
            assert name in declared, f"agent {name} ({path.name}) missing from PROCESSORS"
            proc = declared[name]
            assert (proc.kind, proc.module) == ("agent", module_of(path))
            assert isinstance(arg, ast.Name)
            assert SPECS[topics[arg.id]] in proc.consumes, f"{name} consumes {topics[arg.id]}"
        for name in decorated(tree, "timer"):
            seen += 1
            assert name in declared, f"punctuator {name} ({path.name}) missing from PROCESSORS"
            assert (declared[name].kind, declared[name].module) == ("punctuator", module_of(path))
    agents_declared = [p for p in PROCESSORS if p.kind in ("agent", "punctuator")]
    assert seen == len(agents_declared), "a declared processor no longer exists in the code"


def test_every_table_a_module_creates_is_used_by_a_declared_processor_of_it():
    for path in CODE:
        tree = ast.parse(path.read_text())
        for spec_name in (call.args[0].id for call in spec_calls(tree, "table")):  # type: ignore[attr-defined]
            table = SPECS[spec_name]
            assert table in TABLES, f"{spec_name} not in TABLES"
            owners = [p for p in PROCESSORS if p.module == module_of(path) and table in p.tables]
            assert owners, f"no processor of {module_of(path)} declares table {table.name}"


def test_every_topic_written_anywhere_is_produced_by_a_declared_processor():
    produced = {t for p in PROCESSORS for t in p.produces}
    for path in CODE:
        for spec_name in produced_specs(ast.parse(path.read_text())):
            assert SPECS[spec_name] in produced, f"{path.name} writes {spec_name}: not declared"
    for topic in TOPICS:
        touched = [p for p in PROCESSORS if topic in p.consumes + p.produces + p.reads]
        assert touched, f"topic {topic.name} is in no processor's edges"


def test_renderings_name_every_node():
    for rendering in (graph.text(), graph.mermaid(), graph.dot()):
        for node in [t.name for t in TOPICS] + [t.name for t in TABLES] + [p.name for p in PROCESSORS]:
            assert node in rendering
    assert graph.dot().count("->") == sum(len(graph._edges(p)) for p in PROCESSORS)


def test_readme_diagram_is_the_generated_one():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- topology:begin -->\n```mermaid\n(.*?)```\n<!-- topology:end -->",
                      readme, re.S)
    assert block, "README has no generated topology block"
    assert block.group(1) == graph.mermaid(), "README diagram is stale: ./dev topology --readme"
