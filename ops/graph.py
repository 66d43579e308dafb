"""The stream graph drawn from ``streams.topology``: text, Mermaid and Graphviz DOT.

Nothing here knows the graph; it only renders ``PROCESSORS``, ``TOPICS`` and ``TABLES``, so
``cronstream topology`` and the README's diagram change when the declarations change (a test
compares the README with ``mermaid()``).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from streams.topology import (
    APP_ID,
    DEFAULT_PARTITIONS,
    PROCESSORS,
    TABLES,
    TOPICS,
    ProcessorSpec,
    TableSpec,
    TopicSpec,
)

SHAPES = {"agent": "processor", "punctuator": "punctuator", "client": "client", "api": "source",
          "sink": "sink"}


def _parts(t: TopicSpec) -> int:
    """The partitions drawn: the topic's own count, else the default of the cluster's
    (``CRONSTREAM_PARTITIONS``): the declared graph, the same whatever a deployment sets."""
    return t.count(DEFAULT_PARTITIONS)


def _topic_label(t: TopicSpec) -> str:
    policy = "compacted" if t.compacted else "delete"
    return f"{t.name} [{_parts(t)}p, key {t.key}, {t.schema}, {policy}]"


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
        lines.append(f'  {_id(t.name)}[["{t.name}<br/>{_parts(t)}p key {t.key}"]]')
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
                     f'label="{t.name}\\n{_parts(t)}p key {t.key}"];')
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


def svg() -> str:
    """The graph as an SVG drawn here, for the console's operator page (no Graphviz needed on
    the API's host, no JavaScript library): topics in the left column, processors in the right,
    one line per edge (solid: consumes, dashed: produces, dotted: reads a view), each
    processor's tables under its name. A layered layout is not attempted: two columns keep
    every edge visible and the picture generated from ``streams.topology`` alone."""
    row, width, left_x, right_x, box_w = 34, 900, 10, 520, 330
    topic_y = {t.name: 20 + i * row for i, t in enumerate(TOPICS)}
    proc_y = {p.name: 20 + i * row * 1.4 for i, p in enumerate(PROCESSORS)}
    height = int(max([*topic_y.values(), *proc_y.values()]) + 2 * row)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
           f'role="img" aria-label="cronstream stream topology" class="topology">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
           'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker>'
           '</defs>']
    for p in PROCESSORS:
        py = proc_y[p.name] + 12
        for t, dash, to_proc in ([(t, "", True) for t in p.consumes]
                                 + [(t, "2,3", True) for t in p.reads]
                                 + [(t, "6,4", False) for t in p.produces]):
            ty = topic_y[t.name] + 12
            a, b = ((left_x + box_w, ty), (right_x, py)) if to_proc else \
                ((right_x, py), (left_x + box_w, ty))
            out.append(f'<line x1="{a[0]}" y1="{a[1]}" x2="{b[0]}" y2="{b[1]}" stroke="#888" '
                       f'stroke-dasharray="{dash}" marker-end="url(#arrow)"/>')
    for t in TOPICS:
        y = topic_y[t.name]
        out.append(f'<rect x="{left_x}" y="{y}" width="{box_w}" height="24" rx="3" '
                   f'fill="#e8f0fe" stroke="#4a6fa5"/><text x="{left_x + 6}" y="{y + 16}" '
                   f'font-size="12">{t.name} ({_parts(t)}p{", compacted" if t.compacted else ""})'
                   '</text>')
    for p in PROCESSORS:
        y = proc_y[p.name]
        tables = ", ".join(t.name for t in p.tables)
        out.append(f'<rect x="{right_x}" y="{y}" width="{width - right_x - 10}" height="24" '
                   f'rx="12" fill="#fff4e0" stroke="#a5744a"/><text x="{right_x + 10}" '
                   f'y="{y + 16}" font-size="12">{SHAPES[p.kind]}: {p.name}'
                   f'{" [" + tables + "]" if tables else ""}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
