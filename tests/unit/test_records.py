"""``streams/records.py`` against ``schemas/``: every Avro record has its TypedDict with the same
fields, in the same order, of the same types; a field added to a schema and not to its type
fails here, and so does a type left behind by a schema that went away."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, get_type_hints

import pytest

from streams import records, topology

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
PRIMITIVES = {"string": "str", "long": "int", "int": "int", "double": "float", "float": "float",
              "boolean": "bool", "bytes": "bytes"}


def _python(avro: Any, found: dict[str, dict[str, Any]]) -> str:
    """The annotation ``streams/records.py`` must write for an Avro type (nested records are
    gathered into ``found`` as they are met)."""
    if isinstance(avro, str):
        return PRIMITIVES.get(avro, avro.rsplit(".", 1)[-1])
    if isinstance(avro, list):
        named = " | ".join(_python(branch, found) for branch in avro if branch != "null")
        return f"{named} | None" if "null" in avro else named
    kind = avro["type"]
    if kind == "array":
        return f"list[{_python(avro['items'], found)}]"
    if kind == "map":
        return f"dict[str, {_python(avro['values'], found)}]"
    if kind == "record":
        _gather(avro, found)
        return str(avro["name"])
    return PRIMITIVES[kind]  # a logical type on a primitive (timestamp-millis on a long)


def _gather(schema: dict[str, Any], found: dict[str, dict[str, Any]]) -> None:
    found[schema["name"]] = {field["name"]: _python(field["type"], found)
                             for field in schema["fields"]}


def schema_records() -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, Any]] = {}
    for path in sorted((SCHEMAS / "types").glob("*.avsc")) + sorted(SCHEMAS.glob("*.avsc")):
        _gather(json.loads(path.read_text()), found)
    return found


def typed_records() -> dict[str, type]:
    return {name: value for name, value in vars(records).items()
            if isinstance(value, type) and value.__module__ == records.__name__}


@pytest.mark.parametrize("name", sorted(schema_records()))
def test_each_schema_record_has_its_type_field_for_field(name: str) -> None:
    expected = schema_records()[name]
    typed = typed_records().get(name)
    assert typed is not None, f"schemas/ has record {name}: streams/records.py has no type for it"
    # a TypedDict keeps its postponed annotations as ForwardRefs: their text is what was written
    written = {field: getattr(hint, "__forward_arg__", hint)
               for field, hint in typed.__annotations__.items()}
    assert list(written) == list(expected), (
        f"{name}: fields {list(written)} in streams/records.py, {list(expected)} in schemas/")
    for field, annotation in expected.items():
        assert written[field] == annotation, (
            f"{name}.{field}: {written[field]} in streams/records.py, {annotation} in schemas/")
    get_type_hints(typed)  # every name an annotation uses resolves


def test_no_type_without_a_schema_record() -> None:
    assert sorted(set(typed_records()) - set(schema_records())) == []


def test_every_topic_names_a_typed_record() -> None:
    for spec in topology.TOPICS:
        assert spec.schema in typed_records(), f"{spec.name}: no type {spec.schema}"



# the names the code gives each record where it reads one: ``fired["nominal_ms"]``,
# ``job["schedule"]``, ``campaign["send_at_ms"]``, ... (``streams.runtime.codec``'s ``entry`` is
# a schema's field entry, not a LedgerEntry: that module reads schemas, not records)
READ_AS = {"fired": "Fired", "job": "Job", "cmd": "JobCommand", "campaign": "Campaign",
           "order": "Fanout", "chunk": "RecipientChunk", "target": "Target",
           "schedule": "Schedule", "entry": "LedgerEntry"}
NOT_RECORDS = {"streams/runtime/codec.py"}


def field_reads(source: str) -> list[tuple[int, str, str]]:
    """(line, name, field) of every ``name["field"]`` and ``name.get("field")`` in ``source``
    whose ``name`` is one of ``READ_AS``."""
    reads = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
            name, field = node.value.id, node.slice.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "get" and isinstance(node.func.value, ast.Name) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            name, field = node.func.value.id, node.args[0].value
        else:
            continue
        if name in READ_AS:
            reads.append((node.lineno, name, field))
    return reads


def test_every_field_the_code_reads_of_a_record_is_in_its_schema() -> None:
    """What a type checker would say of ``fired["nominal_ms"]``, without one: a field read by
    name that its record's schema does not have (a typo, a field renamed in ``schemas/``) fails
    here rather than as a KeyError in a worker."""
    root = SCHEMAS.parent
    wrong, reads = [], 0
    for path in sorted((root / "streams").rglob("*.py")):
        where = str(path.relative_to(root))
        if where in NOT_RECORDS:
            continue
        for line, name, field in field_reads(path.read_text()):
            reads += 1
            if field not in getattr(records, READ_AS[name]).__annotations__:
                wrong.append(f"{where}:{line}: {name}[{field!r}] is not a field of "
                             f"{READ_AS[name]}")
    assert wrong == []
    assert reads > 200  # the scan sees the code's reads (268 today)


def test_a_field_the_schema_lacks_is_reported() -> None:
    assert field_reads('fired["nominal_ms"]\njob.get("paused")\nother["x"]') == [
        (1, "fired", "nominal_ms"), (2, "job", "paused")]
