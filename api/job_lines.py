"""The lines of a streamed job import (``POST /v1/job-imports/stream``), parsed one at a time.

Two formats, each fed a line at a time so an import of any size never sits in memory:

- NDJSON (``application/x-ndjson``): a job per line, as ``POST /v1/jobs`` takes it, or
  ``{"delete": "<job id>"}``;
- CSV (``text/csv``): a header of field paths (``name``, ``schedule.cron``, ``target.url``,
  ``labels.team``), then a job per row, nested by those paths; an empty cell is an absent field.
  A ``delete`` column names a job to delete (the row's other cells empty). CSV carries scalar
  fields only (numbers and booleans as text, which validation reads as such): NDJSON takes
  everything.

Pure: the parsers answer ``Create``, ``Delete`` or ``Refused`` (a line's number, the field, the
problem); the route validates what they make exactly as ``POST /v1/jobs`` does.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from typing import Any

from streams.campaigns.recipients import MAX_LINE_BYTES


@dataclass(frozen=True)
class Create:
    line: int
    doc: dict[str, Any] | str  # a CSV row's fields, or an NDJSON line's text (JSON, unparsed)


@dataclass(frozen=True)
class Delete:
    line: int
    job_id: str


@dataclass(frozen=True)
class Refused:
    line: int
    field: str  # a dotted path in the job ("schedule.cron"), or "" for the line itself
    message: str


Parsed = Create | Delete | Refused | None  # None: a blank line, or the CSV header


def _delete(line: int, value: Any) -> Delete | Refused:
    if not isinstance(value, str) or not value.strip():
        return Refused(line, "delete", "must be a job id")
    return Delete(line, value.strip())


class NdjsonJobs:
    """A job's line is handed on as its text, which the route validates straight from JSON
    (malformed JSON is refused there, as the model's error); a line that may be a delete is
    parsed here."""

    def feed(self, number: int, text: str) -> Parsed:
        if not text.strip():
            return None
        if len(text) > MAX_LINE_BYTES:
            return Refused(number, "", f"line longer than {MAX_LINE_BYTES} bytes")
        if '"delete"' not in text:
            return Create(number, text)
        try:
            doc = json.loads(text)
        except ValueError as exc:
            return Refused(number, "", f"malformed JSON: {exc.args[0][:100]}")
        if not isinstance(doc, dict):
            return Refused(number, "", "not a JSON object")
        if "delete" in doc:
            if len(doc) != 1:
                return Refused(number, "delete", "a delete line has no other fields")
            return _delete(number, doc["delete"])
        return Create(number, text)


class CsvJobs:
    """Line numbers count from 1, the header."""

    def __init__(self) -> None:
        self.header: list[list[str]] | None = None

    def feed(self, number: int, text: str) -> Parsed:
        if self.header is None:
            return self._header(number, text)
        if not text.strip():
            return None
        if len(text) > MAX_LINE_BYTES:
            return Refused(number, "", f"line longer than {MAX_LINE_BYTES} bytes")
        try:
            values = next(csv.reader([text], strict=True))
        except csv.Error as exc:
            return Refused(number, "", f"malformed CSV: {exc}")
        if len(values) != len(self.header):
            return Refused(number, "", f"expected {len(self.header)} fields, got {len(values)}")
        cells = [(path, value) for path, value in zip(self.header, values, strict=True) if value]
        if any(path == ["delete"] for path, _ in cells):
            if len(cells) != 1:
                return Refused(number, "delete", "a delete row has its other cells empty")
            return _delete(number, cells[0][1])
        doc: dict[str, Any] = {}
        for path, value in cells:
            into = doc
            for step in path[:-1]:
                into = into.setdefault(step, {})
            into[path[-1]] = value
        return Create(number, doc)

    def _header(self, number: int, text: str) -> Refused | None:
        try:
            names = next(csv.reader([text.lstrip("\ufeff")], strict=True), [])
        except csv.Error as exc:
            return Refused(number, "", f"the header is malformed CSV: {exc}")
        paths = [name.strip().split(".") for name in names]
        if not paths or any(not all(paths_step for paths_step in path) for path in paths):
            return Refused(number, "", "the header names a field path in each column "
                                       "(schedule.cron, target.url, labels.team, delete)")
        flat = [".".join(path) for path in paths]
        if len(set(flat)) != len(flat):
            return Refused(number, "", "the header names a column twice")
        clash = next((a for a in flat for b in flat if b.startswith(a + ".")), None)
        if clash is not None:
            return Refused(number, "", f"the header has both {clash} and fields inside it")
        self.header = paths
        return None

    def finish(self) -> Refused | None:
        """An upload without a header (an empty body) is refused."""
        if self.header is None:
            return Refused(1, "", "empty import: a CSV header naming the fields is required")
        return None
