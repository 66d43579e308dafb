"""The sinks' configs: which sink writes one statement a record, whatever JDBC URL it is given.

The ledger and feedback sinks keep their rows, so a batch naming one key twice must reach
Postgres as one statement a record, in order (connectors/ledger.sql's header); the
recipient-outcomes sink keeps the driver's multi-row inserts, which its trigger makes safe."""

import pytest

from stack.local import sink_specs
from streams.runtime import settings
from streams.runtime.codec import SCHEMAS_DIR


def urls(monkeypatch: pytest.MonkeyPatch, url: str | None) -> dict[str, str]:
    if url is None:
        monkeypatch.delenv("CRONSTREAM_SINK_PG_URL", raising=False)
    else:
        monkeypatch.setenv("CRONSTREAM_SINK_PG_URL", url)
    specs = sink_specs(settings.load(), SCHEMAS_DIR)
    assert {s["config"]["use.reduction.buffer"] for s in specs} == {"false"}
    return {s["name"]: s["config"]["connection.url"] for s in specs}


def test_the_sinks_that_keep_rows_write_one_statement_a_record(monkeypatch):
    found = urls(monkeypatch, None)
    multi = found.pop("cronstream-recipient-outcomes-sink")
    assert multi.endswith("reWriteBatchedInserts=true")
    assert set(found) == {"cronstream-ledger-sink", "cronstream-ses-feedback-sink"}
    assert set(found.values()) == {f"{multi}&reWriteBatchedInserts=false"}


@pytest.mark.parametrize(("given", "per_row"), [
    ("jdbc:postgresql://db.internal:5432/cs", "jdbc:postgresql://db.internal:5432/cs"
                                              "?reWriteBatchedInserts=false"),
    ("jdbc:postgresql://db.internal/cs?sslmode=verify-full",
     "jdbc:postgresql://db.internal/cs?sslmode=verify-full&reWriteBatchedInserts=false"),
])
def test_a_url_of_the_operators_gets_the_setting_appended(monkeypatch, given, per_row):
    found = urls(monkeypatch, given)
    assert found["cronstream-recipient-outcomes-sink"] == given
    assert found["cronstream-ledger-sink"] == found["cronstream-ses-feedback-sink"] == per_row
