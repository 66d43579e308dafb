"""Avro single-object encoding for every cronstream topic record.

Why single-object encoding (magic ``C3 01`` + CRC-64-AVRO fingerprint + binary body): a reader
finds the writer schema from the record itself, with no schema registry (Confluent's is not on
Maven Central). The Kafka Connect converter in ``connectors/avro-converter`` reads the same
``schemas/`` folder and the same fingerprints, so Python and the sink agree by construction.

Older writer schemas live in ``schemas/history/`` (``<record>.<n>.avsc``): a record written with
one is read into the current schema of the same name (Avro schema resolution: new fields take
their defaults), so changing an ``.avsc`` does not make the records already in Kafka unreadable.

Shared named types live in ``schemas/types/``; a topic schema names them (``io.cronstream.Target``)
and this module expands the first reference inline, exactly as Avro's Java parser does, so the
parsing canonical form (and hence the fingerprint) is the same on both sides.
"""

from __future__ import annotations

import io
import json
import struct
from functools import cache
from pathlib import Path
from typing import Any

import fastavro
from fastavro.read import SchemaResolutionError
from fastavro.schema import to_parsing_canonical_form

SCHEMAS_DIR = Path(__file__).resolve().parents[2] / "schemas"
MAGIC = b"\xc3\x01"
HEADER_LEN = 10

_EMPTY64 = 0xC15D213AA4D7A795


def _crc64_table() -> list[int]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (_EMPTY64 & -(fp & 1))
        table.append(fp)
    return table


_CRC64 = _crc64_table()


def fingerprint64(canonical: str) -> int:
    """CRC-64-AVRO of a parsing canonical form (the Avro spec's Rabin fingerprint)."""
    fp = _EMPTY64
    for byte in canonical.encode("utf-8"):
        fp = (fp >> 8) ^ _CRC64[(fp ^ byte) & 0xFF]
    return fp


class SchemaError(ValueError):
    """A record does not match its schema, or bytes are not a cronstream record."""


def _expand(node: Any, types: dict[str, Any], seen: set[str]) -> Any:
    if isinstance(node, str):
        if node in types and node not in seen:
            seen.add(node)
            return _expand(types[node], types, seen)
        return node
    if isinstance(node, list):
        return [_expand(item, types, seen) for item in node]
    if isinstance(node, dict):
        if node.get("type") in ("record", "enum", "fixed") and "name" in node:
            seen.add(_full_name(node))
        return {key: _expand(value, types, seen) if key in ("type", "fields", "items",
                                                              "values") else value
                for key, value in node.items()}
    return node


def _full_name(node: dict[str, Any]) -> str:
    name = node["name"]
    return name if "." in name else f"{node.get('namespace', 'io.cronstream')}.{name}"


class Codec:
    """Encoder/decoder for one schema folder, keyed by record name (``Job``, ``Fired`` …)."""

    def __init__(self, folder: Path = SCHEMAS_DIR) -> None:
        types = {
            _full_name(doc): doc
            for doc in (json.loads(p.read_text()) for p in sorted((folder / "types").glob("*.avsc")))
        }
        self._by_name: dict[str, tuple[Any, bytes]] = {}
        # fingerprint -> (writer schema, reader schema or None when the writer is current)
        self._by_fingerprint: dict[bytes, tuple[Any, Any]] = {}
        self._prefixes: dict[tuple[bytes, tuple[str, ...]], Any] = {}  # decode_leading's
        for path in sorted(folder.glob("*.avsc")):
            expanded = _expand(json.loads(path.read_text()), types, set())
            parsed, header = self._parse(expanded)
            self._by_name[expanded["name"]] = (parsed, header)
            self._by_fingerprint[header[2:]] = (parsed, None)
        for path in sorted((folder / "history").glob("*.avsc")):
            expanded = _expand(json.loads(path.read_text()), types, set())
            parsed, header = self._parse(expanded)
            current = self._by_name[expanded["name"]][0]
            self._by_fingerprint.setdefault(header[2:], (parsed, current))

    @staticmethod
    def _parse(expanded: dict[str, Any]) -> tuple[Any, bytes]:
        parsed = fastavro.parse_schema(expanded)
        return parsed, MAGIC + struct.pack("<Q", fingerprint64(to_parsing_canonical_form(parsed)))

    @property
    def names(self) -> list[str]:
        return sorted(self._by_name)

    def encode(self, name: str, record: dict[str, Any]) -> bytes:
        parsed, header = self._by_name[name]
        return header + _write(name, parsed, record, strict=True)

    def decode(self, data: bytes) -> dict[str, Any]:
        if len(data) < HEADER_LEN or data[:2] != MAGIC:
            raise SchemaError("not an Avro single-object encoded record")
        schemas = self._by_fingerprint.get(data[2:HEADER_LEN])
        if schemas is None:
            raise SchemaError(f"unknown schema fingerprint {data[2:HEADER_LEN].hex()}")
        writer, reader = schemas
        try:
            record: dict[str, Any] = fastavro.schemaless_reader(
                io.BytesIO(data[HEADER_LEN:]), writer, reader, return_record_name=False
            )
        except (EOFError, ValueError, IndexError, SchemaResolutionError) as exc:
            # truncated or corrupt bytes: a SchemaError, which readers log and skip, rather
            # than an EOFError that stopped whatever read it
            raise SchemaError(f"{writer['name']}: unreadable body ({exc!r})") from exc
        return record

    def leading_string(self, data: bytes, name: str, field: str) -> str:
        """One string field of a ``name`` record without decoding the rest. Why: a store that
        keeps records as bytes only needs the field it indexes (a job's tenant), and decoding
        1M jobs whole to read it took most of the API's start. Read straight from the bytes when
        every field before it in the writer schema is a string (Avro: a length, then UTF-8),
        else by a whole decode, so a reordered schema stays correct, only slower."""
        writer = self._writer(data, name)
        skip = _strings_before(writer, field)
        if skip is None:
            return str(self.decode(data)[field])
        pos = HEADER_LEN
        for _ in range(skip + 1):
            length, pos = _read_long(data, pos)
            start, pos = pos, pos + length
            if length < 0 or pos > len(data):
                raise SchemaError(f"{name}: truncated record")
        try:
            return data[start:pos].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SchemaError(f"{name}.{field} is not UTF-8: {exc}") from exc

    def _writer(self, data: bytes, name: str) -> Any:
        """The writer schema of ``data``, a ``name`` record; SchemaError if it is neither a
        known schema's nor a ``name``."""
        schemas = self._by_fingerprint.get(data[2:HEADER_LEN]) if data[:2] == MAGIC else None
        if schemas is None:
            raise SchemaError("not an Avro single-object encoded record of a known schema")
        writer = schemas[0]
        if writer["name"].rsplit(".", 1)[-1] != name:
            raise SchemaError(f"a {writer['name']} record where a {name} was expected")
        return writer

    def decode_leading(self, data: bytes, name: str, fields: tuple[str, ...]) -> dict[str, Any]:
        """``fields`` of a ``name`` record (and any before them) without decoding the rest: read
        with the writer schema cut after the last of them, which stops where they end (Avro's
        binary record is its fields in order, with nothing after). Why: the executor sorts a
        spike's fired records into the tenants' turns by their first fields, a fifth of a whole
        decode; the whole record is decoded when the record's turn comes. A writer schema that
        lacks one of ``fields`` is decoded whole."""
        writer = self._writer(data, name)
        prefix = self._prefix(data[2:HEADER_LEN], fields)
        if prefix is None:
            return self.decode(data)
        try:
            record: dict[str, Any] = fastavro.schemaless_reader(
                io.BytesIO(data[HEADER_LEN:]), prefix, None, return_record_name=False)
        except (EOFError, ValueError, IndexError) as exc:
            raise SchemaError(f"{writer['name']}: unreadable body ({exc!r})") from exc
        return record

    def _prefix(self, fingerprint: bytes, fields: tuple[str, ...]) -> Any:
        """The writer schema of ``fingerprint`` cut after the last of ``fields`` (parsed once),
        or None when it lacks one of them."""
        key = (fingerprint, fields)
        if key not in self._prefixes:
            writer = self._by_fingerprint[fingerprint][0]
            names = [field["name"] for field in writer["fields"]]
            if not set(fields) <= set(names):
                self._prefixes[key] = None
            else:
                last = max(names.index(field) for field in fields)
                self._prefixes[key] = fastavro.parse_schema(
                    {"type": "record", "name": f"{writer['name']}_leading",
                     "fields": writer["fields"][:last + 1]},
                    named_schemas=dict(writer["__named_schemas"]))
        return self._prefixes[key]

    def fingerprint(self, name: str) -> bytes:
        return self._by_name[name][1][2:]

    def template(self, name: str, varying: tuple[str, ...]) -> RecordTemplate:
        """A template for ``name`` records whose ``varying`` fields (a contiguous run in the
        schema) are only known at the last moment; see ``RecordTemplate``."""
        parsed, header = self._by_name[name]
        return RecordTemplate(name, parsed, header, varying)


class RecordTemplate:
    """Encodes a record in two steps: everything but a contiguous run of ``varying`` fields ahead
    of time (``freeze``), then only that run (``fill``). Why: the scheduler prepares a spike's
    fired records before they fall due and must not spend the due second encoding fields it
    knew all along. Sound because Avro's binary encoding of a record is the concatenation of
    its fields' encodings, in schema order; ``fill`` gives the same bytes as ``Codec.encode``."""

    def __init__(self, name: str, parsed: dict[str, Any], header: bytes,
                 varying: tuple[str, ...]) -> None:
        names = [field["name"] for field in parsed["fields"]]
        first = names.index(varying[0])
        if tuple(names[first:first + len(varying)]) != varying:
            raise SchemaError(f"{name}: {varying} is not a contiguous run of its fields")
        named = parsed["__named_schemas"]

        def part(fields: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
            return fastavro.parse_schema({"type": "record", "name": f"{parsed['name']}{suffix}",
                                          "fields": fields}, named_schemas=dict(named))

        fields = parsed["fields"]
        self.name, self.header, self.varying = name, header, varying
        self._names = set(names)
        self._before = part(fields[:first], "_before")
        self._run = part(fields[first:first + len(varying)], "_varying")
        self._after = part(fields[first + len(varying):], "_after")

    def freeze(self, record: dict[str, Any]) -> tuple[bytes, bytes]:
        """The encodings of the fields before and after the varying run (``record`` may leave
        the varying fields out; a field the schema lacks is an error, as in ``encode``)."""
        unknown = record.keys() - self._names
        if unknown:
            raise SchemaError(f"{self.name}: fields not in the schema: {sorted(unknown)}")
        return (self.header + _write(self.name, self._before, record, strict=False),
                _write(self.name, self._after, record, strict=False))

    def fill(self, frozen: tuple[bytes, bytes], values: dict[str, Any]) -> bytes:
        """The whole record: ``frozen`` around the encoding of the varying fields' ``values``."""
        return self.join(frozen, self.encode_run(values))

    def encode_run(self, values: dict[str, Any]) -> bytes:
        """The encoding of the varying fields alone. Records that share those values (a spike's
        slots decided in the same millisecond) share it too: ``join`` each with its own frozen
        parts instead of encoding the same run again for every one of them."""
        return _write(self.name, self._run, values, strict=True)

    @staticmethod
    def join(frozen: tuple[bytes, bytes], run: bytes) -> bytes:
        """A record from its frozen parts and an ``encode_run`` of its varying fields."""
        return frozen[0] + run + frozen[1]


def _write(name: str, schema: dict[str, Any], record: dict[str, Any], strict: bool) -> bytes:
    """Avro binary of ``record``; ``strict`` also refuses fields the schema lacks (and fills
    missing ones from their defaults, as the non-strict mode does)."""
    buf = io.BytesIO()
    try:
        fastavro.schemaless_writer(buf, schema, record, strict_allow_default=strict)
    except (ValueError, TypeError, KeyError) as exc:
        raise SchemaError(f"{name}: {exc}") from exc
    return buf.getvalue()


def _strings_before(schema: dict[str, Any], field: str) -> int | None:
    """How many fields precede ``field`` when it and all of them are plain strings, else None."""
    for index, entry in enumerate(schema["fields"]):
        if entry["type"] != "string":
            return None
        if entry["name"] == field:
            return index
    return None


def _read_long(data: bytes, pos: int) -> tuple[int, int]:
    """An Avro long (zig-zag varint) at ``pos``: its value and the position after it."""
    shift = result = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise SchemaError("truncated or malformed varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


@cache
def codec() -> Codec:
    """The process-wide codec for the repository's ``schemas/`` folder."""
    return Codec()
