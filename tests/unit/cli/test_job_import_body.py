"""``cronstream jobs import``'s body: what it streams to ``POST /v1/job-imports/stream``."""

from __future__ import annotations

import json

import pytest

from cli.failures import CliError
from cli.resources import _import_body


def test_a_yaml_list_goes_as_ndjson_a_job_per_line_in_the_files_order(tmp_path, capsys):
    spec = tmp_path / "jobs.yaml"
    spec.write_text("- name: first\n  schedule: {cron: '0 0 * * *'}\n- delete: old-job\n")
    kind, body = _import_body(str(spec))
    lines = b"".join(body).decode().splitlines()
    assert kind == "application/x-ndjson"
    assert [json.loads(line) for line in lines] == [
        {"name": "first", "schedule": {"cron": "0 0 * * *"}}, {"delete": "old-job"}]
    assert "uploading jobs.yaml" in capsys.readouterr().err, "with a progress line"


@pytest.mark.parametrize("name, kind", [("jobs.csv", "text/csv"),
                                        ("jobs.ndjson", "application/x-ndjson"),
                                        ("jobs.jsonl", "application/x-ndjson")])
def test_ndjson_and_csv_files_are_streamed_as_they_are(tmp_path, name, kind):
    path = tmp_path / name
    path.write_bytes(b"as written\n" * 3)
    sent_kind, body = _import_body(str(path))
    assert sent_kind == kind and b"".join(body) == b"as written\n" * 3


def test_a_missing_file_is_a_usage_error_naming_it(tmp_path):
    with pytest.raises(CliError, match="no such file"):
        _import_body(str(tmp_path / "gone.csv"))
