"""``api.job_lines``: a streamed import's lines, NDJSON and CSV, each parsed on its own."""

from __future__ import annotations

import pytest

from api.job_lines import Create, CsvJobs, Delete, NdjsonJobs, Refused
from streams.campaigns.recipients import MAX_LINE_BYTES


def feed(parser, *lines):
    return [parser.feed(number, text) for number, text in enumerate(lines, start=1)]


def test_ndjson_lines_are_jobs_or_deletes_and_a_bad_delete_is_named_by_its_number():
    """A job's line goes on as its text (the route validates the JSON and the job in one step);
    a delete's is parsed here."""
    out = feed(NdjsonJobs(), '{"schedule": {"cron": "* * * * *"}}', "", '{"delete": "j1"}',
               '{"delete": "j2", "name": "x"}', '{"delete": 7}', '{"delete": oops}',
               '["delete"]', "x" * (MAX_LINE_BYTES + 1))
    assert out[0] == Create(1, '{"schedule": {"cron": "* * * * *"}}')
    assert out[1] is None and out[2] == Delete(3, "j1")
    assert [(r.line, r.field) for r in out[3:]] == [(4, "delete"), (5, "delete"), (6, ""),
                                                     (7, ""), (8, "")]
    assert "malformed JSON" in out[5].message and out[6].message == "not a JSON object"


def test_a_csv_header_names_field_paths_and_each_row_nests_its_non_empty_cells():
    parser = CsvJobs()
    out = feed(parser, "name,schedule.cron,schedule.timezone,target.type,target.url,labels.team,delete",
               "nightly,0 3 * * *,,webhook,https://example.com/h,billing,",
               ",,,,,,old-job",
               "x,0 3 * * *,,webhook,https://example.com/h,,old-job",
               "too,few")
    assert out[0] is None  # the header
    assert out[1] == Create(2, {"name": "nightly", "schedule": {"cron": "0 3 * * *"},
                                "target": {"type": "webhook", "url": "https://example.com/h"},
                                "labels": {"team": "billing"}})
    assert out[2] == Delete(3, "old-job")
    assert out[3] == Refused(4, "delete", "a delete row has its other cells empty")
    assert out[4] == Refused(5, "", "expected 7 fields, got 2")
    assert parser.finish() is None


@pytest.mark.parametrize("header, problem", [
    ("name,name", "names a column twice"),
    ("schedule,schedule.cron", "both schedule and fields inside it"),
    ("name,,target.url", "a field path in each column"),
    ("schedule..cron", "a field path in each column"),
])
def test_a_csv_header_that_cannot_say_where_each_cell_goes_is_refused(header, problem):
    parser = CsvJobs()
    refused = parser.feed(1, header)
    assert isinstance(refused, Refused) and problem in refused.message and refused.line == 1
    assert parser.finish() is not None, "and the import has no header yet"


def test_an_empty_csv_import_is_refused_for_want_of_a_header():
    assert CsvJobs().finish() == Refused(1, "", "empty import: a CSV header naming the fields "
                                                "is required")
