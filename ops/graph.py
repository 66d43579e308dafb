"""The stream graph drawn from ``streams.topology``: text, Mermaid and Graphviz DOT.

Nothing here knows the graph; it only renders ``PROCESSORS``, ``TOPICS`` and ``TABLES``, so
``cronstream topology`` and the README's diagram change when the declarations change (a test
compares the README with ``mermaid()``).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from streams.topology import APP_ID, PROCESSORS, TABLES, TOPICS, ProcessorSpec, TableSpec, TopicSpec

SHAPES = {"agent": "processor", "punctuator": "punctuator", "client": "client", "api": "source",
          "sink": "sink"}


def _topic_label(t: TopicSpec) -> str:
    policy = "compacted" if t.compacted else "delete"
    return f"{t.name} [{t.partitions}p, key {t.key}, {t.schema}, {policy}]"


def _table_label(t: TableSpec) -> str:
    return f"table {t.name} [key {t.key}, changelog {t.changelog(APP_ID)}]"


def text() -> str:
    """Kafka Streams' ``TopologyDescription`` style: one block per processor."""
    lines = ["Topics:"]
    lines += [f"  {_topic_label(t)}" for t in TOPICS]
    lines.append("Tables (RocksDB, changelog-backed):")
    lines += [f"  {_table_label(t)}" for t in TABLES]
    lines.append("Processors:")
    for p in PROCESSORS:
        lines.append(f"  {SHAPES[p.kind]}: {p.name} ({p.module})")
        for label, specs in (("consumes", p.consumes), ("reads", p.reads),
                             ("produces", p.produces)):
            if specs:
                lines.append(f"    {label}: {', '.join(s.name for s in specs)}")
        if p.tables:
            lines.append(f"    tables: {', '.join(t.name for t in p.tables)}")
        if p.doc:
            lines.append(f"    -- {p.doc}")
    return "\n".join(lines) + "\n"


def _id(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def _edges(p: ProcessorSpec) -> list[tuple[str, str, str]]:
    """(from, to, style) with style solid (stream), dotted (view read) or table."""
    me = _id(p.name)
    edges = [(_id(t.name), me, "solid") for t in p.consumes]
    edges += [(_id(t.name), me, "dotted") for t in p.reads]
    edges += [(me, _id(t.name), "solid") for t in p.produces]
    edges += [(me, _id("table " + t.name), "table") for t in p.tables]
    return edges


def mermaid() -> str:
    lines = ["flowchart LR"]
    for t in TOPICS:
        lines.append(f'  {_id(t.name)}[["{t.name}<br/>{t.partitions}p key {t.key}"]]')
    for t in TABLES:
        lines.append(f'  {_id("table " + t.name)}[("table {t.name}")]')  # keys: docs/architecture.md
    for p in PROCESSORS:
        open_, close = {"agent": ("(", ")"), "punctuator": ("{{", "}}"), "client": ("[\\", "\\]"),
                        "api": (">", "]"), "sink": ("[/", "/]")}[p.kind]
        lines.append(f'  {_id(p.name)}{open_}"{SHAPES[p.kind]}: {p.name}"{close}')
    arrows = {"solid": "-->", "dotted": "-.->", "table": "---"}
    for p in PROCESSORS:
        lines += [f"  {a} {arrows[style]} {b}" for a, b, style in _edges(p)]
    return "\n".join(lines) + "\n"


def dot() -> str:
    lines = ["digraph cronstream {", "  rankdir=LR;", '  node [fontname="Helvetica"];']
    for t in TOPICS:
        lines.append(f'  {_id(t.name)} [shape=box, style=filled, fillcolor="#e8f0fe", '
                     f'label="{t.name}\\n{t.partitions}p key {t.key}"];')
    for t in TABLES:
        lines.append(f'  {_id("table " + t.name)} [shape=cylinder, label="table {t.name}\\n'
                     f'{t.changelog(APP_ID)}"];')
    shapes = {"agent": "ellipse", "punctuator": "hexagon", "client": "component", "api": "cds",
              "sink": "parallelogram"}
    for p in PROCESSORS:
        lines.append(f'  {_id(p.name)} [shape={shapes[p.kind]}, label="{p.name}\\n({p.kind})"];')
    styles = {"solid": "", "dotted": " [style=dotted]", "table": " [dir=both, arrowhead=none]"}
    for p in PROCESSORS:
        lines += [f"  {a} -> {b}{styles[style]};" for a, b, style in _edges(p)]
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(out: Path) -> Path:
    """Render the DOT graph with Graphviz (``dot``) into ``out`` (.svg or .png)."""
    fmt = out.suffix.lstrip(".")
    if fmt not in ("svg", "png"):
        raise ValueError(f"--render: {out.name}: the file must end in .svg or .png")
    binary = shutil.which("dot")
    if binary is None:
        raise RuntimeError("--render needs Graphviz's `dot` (Debian: apt-get install graphviz)")
    subprocess.run([binary, f"-T{fmt}", "-o", str(out)], input=dot().encode(), check=True)
    return out
