"""Recipient lists: parse an upload line by line, report bad rows, drop duplicates, and group
recipients into chunks of at most 50 that share a recipient partition (one SES bulk call each).

Pure and streaming: ``CsvRows``/``NdjsonRows`` are fed one line at a time and answer ``Row`` or
``BadRow``, so a 50-million-row upload never sits in memory. Duplicate
detection keeps only a fingerprint per address, in a caller-supplied set-like store (the API
uses an on-disk RocksDB for large uploads).
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii as _json_string  # json.dumps's own, in C

from streams.topology import partition_for

CHUNK = 50  # SES SendBulkEmail takes at most 50 destinations
MAX_LINE_BYTES = 16 * 1024
# RFC 5322 is looser; this is what SES and mailbox providers accept in practice
EMAIL = re.compile(r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}"
                   r"[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$")


@dataclass(frozen=True)
class Row:
    line: int
    email: str
    vars: dict[str, str]


@dataclass(frozen=True)
class BadRow:
    line: int
    reason: str


def normalise(address: str) -> str | None:
    """The canonical form of an address (trimmed, lowercased), or None if it is not one."""
    candidate = address.strip().lower()
    if len(candidate) > 254 or not EMAIL.match(candidate):
        return None
    return candidate


def template_data(variables: Mapping[str, str]) -> str:
    """A recipient's columns as SES's ``ReplacementTemplateData``: the text ``json.dumps`` writes
    for a str -> str map (a property test holds them equal). Why not ``json.dumps``: it makes a
    new C encoder on every call, 2.6x the cost of this, once for every recipient of a campaign."""
    return "{" + ", ".join(f"{_json_string(k)}: {_json_string(v)}"
                           for k, v in variables.items()) + "}"


def _row(line: int, record: dict[str, str]) -> Row | BadRow:
    raw = record.get("email")
    if raw is None or not isinstance(raw, str) or not raw.strip():
        return BadRow(line, "missing email")
    email = normalise(raw)
    if email is None:
        return BadRow(line, f"invalid email address {raw.strip()[:100]!r}")
    extra = {k: str(v)[:1000] for k, v in record.items() if k != "email" and k is not None}
    return Row(line, email, extra)


class Lines:
    """An upload's bytes cut into lines, never holding more than ``limit`` bytes of one.

    Why: the upload route used to buffer until a newline, so a body without one (or a CSV
    header line that never ended) grew the API's memory without bound, for as long as the
    tenant cared to send (issue 40). A line past ``limit`` comes out as ``None`` (a bad row,
    or a refused header, for the caller), its bytes dropped as they arrive."""

    def __init__(self, limit: int = MAX_LINE_BYTES) -> None:
        self.limit = limit
        self._pending = bytearray()
        self._over = False

    def feed(self, piece: bytes) -> list[bytes | None]:
        """The lines ``piece`` completes (without their ``\n``; None: one over the limit)."""
        out: list[bytes | None] = []
        start = 0
        while True:
            newline = piece.find(b"\n", start)
            end = len(piece) if newline < 0 else newline
            if not self._over:
                room = self.limit + 1 - len(self._pending)  # one byte past says "over"
                self._pending += piece[start:min(end, start + room)]
                if len(self._pending) > self.limit:
                    self._over = True
                    self._pending.clear()
            if newline < 0:
                return out
            out.append(None if self._over else bytes(self._pending))
            self._pending.clear()
            self._over = False
            start = newline + 1

    def end(self) -> list[bytes | None]:
        """The last line, when the body does not end with a newline."""
        if self._over:
            return [None]
        return [bytes(self._pending)] if self._pending else []


class CsvRows:
    """CSV with a header naming an ``email`` column; other columns become template variables.
    Fed one line at a time (line numbers count from 1, the header)."""

    def __init__(self) -> None:
        self.header: list[str] | None = None
        self.failed = False

    def feed(self, number: int, text: str) -> Row | BadRow | None:
        if self.failed:
            return None
        if self.header is None:
            header = [h.strip().lower() for h in next(csv.reader([text.lstrip("\ufeff")]), [])]
            if "email" not in header:
                self.failed = True
                return BadRow(number, "header has no 'email' column")
            self.header = header
            return None
        if not text.strip():
            return None
        if len(text) > MAX_LINE_BYTES:
            return BadRow(number, f"line longer than {MAX_LINE_BYTES} bytes")
        try:
            values = next(csv.reader([text], strict=True))
        except csv.Error as exc:
            return BadRow(number, f"malformed CSV: {exc}")
        if len(values) != len(self.header):
            return BadRow(number, f"expected {len(self.header)} fields, got {len(values)}")
        return _row(number, dict(zip(self.header, values, strict=True)))


class NdjsonRows:
    """One JSON object per line with an ``email`` field."""

    def feed(self, number: int, text: str) -> Row | BadRow | None:
        if not text.strip():
            return None
        if len(text) > MAX_LINE_BYTES:
            return BadRow(number, f"line longer than {MAX_LINE_BYTES} bytes")
        try:
            record = json.loads(text)
        except ValueError as exc:
            return BadRow(number, f"malformed JSON: {exc.args[0][:100]}")
        if not isinstance(record, dict):
            return BadRow(number, "not a JSON object")
        return _row(number, {str(k): v if isinstance(v, str) else json.dumps(v)
                             for k, v in record.items()})


def parse(parser: CsvRows | NdjsonRows, lines: Iterable[str]) -> Iterator[Row | BadRow]:
    for number, text in enumerate(lines, start=1):
        item = parser.feed(number, text)
        if item is not None:
            yield item
    if isinstance(parser, CsvRows) and parser.header is None and not parser.failed:
        yield BadRow(1, "empty upload: a header with an 'email' column is required")


def fingerprint(email: str) -> bytes:
    return hashlib.blake2b(email.encode(), digest_size=8).digest()


@dataclass
class Chunker:
    """Groups accepted rows into per-partition chunks of <= CHUNK, dropping duplicates."""

    partitions: int
    seen: MutableMapping[bytes, bytes]
    accepted: int = 0
    duplicates: int = 0
    _open: dict[int, list[Row]] = field(default_factory=dict)

    def add(self, row: Row) -> tuple[int, list[Row]] | None:
        """Returns (partition, full chunk) when this row completes one."""
        key = fingerprint(row.email)
        if key in self.seen:
            self.duplicates += 1
            return None
        self.seen[key] = b""
        self.accepted += 1
        part = partition_for(row.email, self.partitions)
        rows = self._open.setdefault(part, [])
        rows.append(row)
        if len(rows) == CHUNK:
            del self._open[part]
            return part, rows
        return None

    def rest(self) -> list[tuple[int, list[Row]]]:
        """The partly filled chunks, at the end of the upload."""
        out = sorted(self._open.items())
        self._open = {}
        return out
