import struct

import pytest

from streams.runtime.codec import Codec, SchemaError, codec, fingerprint64
from streams.runtime.settings import REPO_ROOT
from streams.topology import TOPICS


def test_fingerprint_matches_the_avro_spec_test_vector():
    # Avro's own test data: the CRC-64-AVRO fingerprint of the schema "null"
    assert struct.unpack("<q", struct.pack("<Q", fingerprint64('"null"')))[0] == 7195948357588979594


def test_every_topic_has_its_schema():
    assert {t.schema for t in TOPICS} <= set(codec().names)


def _job():
    return {
        "job_id": "j1", "tenant": "t", "revision": 3, "paused": False,
        "schedule": {"cron": "*/2 * * * * *", "timezone": "Europe/Paris"},
        "target": {"type": "webhook", "url": "http://example.test/h", "headers": {"a": "b"}},
        "created_ms": 1, "updated_ms": 2,
    }


def test_round_trip_fills_defaults_and_keeps_values():
    data = codec().encode("Job", _job())
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == codec().fingerprint("Job")
    back = codec().decode(data)
    assert back["schedule"]["timezone"] == "Europe/Paris"
    assert back["schedule"]["at_ms"] is None
    assert back["target"]["headers"] == {"a": "b"}
    assert back["target"]["method"] == "POST"
    assert back["misfire_policy"] == "fire_once"


def test_shared_types_expand_inline_in_each_topic_schema():
    fired = {
        "fire_id": "j1@x", "job_id": "j1", "tenant": "t", "job_revision": 1, "nominal_ms": 5,
        "fired_ms": 6, "decision": "fired", "epoch": 2, "target": _job()["target"],
    }
    assert codec().decode(codec().encode("Fired", fired))["target"]["url"] == "http://example.test/h"


def test_missing_required_field_is_a_schema_error():
    job = _job()
    del job["tenant"]
    with pytest.raises(SchemaError, match="Job"):
        codec().encode("Job", job)


@pytest.mark.parametrize("data", [b"", b"{}", b"\xc3\x01" + b"\x00" * 8 + b"\x02"])
def test_foreign_bytes_are_rejected(data):
    with pytest.raises(SchemaError):
        codec().decode(data)


def test_a_second_codec_reads_what_the_first_wrote():
    assert Codec().decode(codec().encode("Job", _job()))["job_id"] == "j1"


def encode_with_history(file_name: str, record: dict) -> bytes:
    """``record`` single-object encoded with ``schemas/history/<file_name>``, as a writer of that
    older version did: the codec itself only writes the current schemas."""
    import io
    import json

    import fastavro
    from fastavro.schema import to_parsing_canonical_form

    from streams.runtime.codec import MAGIC, SCHEMAS_DIR, _expand, _full_name

    types = {_full_name(doc): doc for doc in (json.loads(p.read_text())
                                              for p in (SCHEMAS_DIR / "types").glob("*.avsc"))}
    old = fastavro.parse_schema(_expand(json.loads((SCHEMAS_DIR / "history" / file_name)
                                               .read_text()), types, set()))
    buf = io.BytesIO()
    buf.write(MAGIC + struct.pack("<Q", fingerprint64(to_parsing_canonical_form(old))))
    fastavro.schemaless_writer(buf, old, record)
    return buf.getvalue()


def test_records_written_with_an_older_schema_are_read_into_the_current_one():
    """schemas/history/tenant.1.avsc predates ip_pools: such records still decode, with the
    new field's default, instead of becoming unreadable when the schema changed."""
    data = encode_with_history("tenant.1.avsc", {
        "tenant": "acme", "key_sha256": "ab", "allowed_targets": [], "max_jobs": 5,
        "min_interval_s": 1, "requests_per_s": 9, "created_ms": 1})
    record = codec().decode(data)
    assert record["tenant"] == "acme" and record["ip_pools"] == {}
    assert data[2:10] != codec().fingerprint("Tenant")  # it really was another schema


# a ledger entry as the schema before campaigns (schemas/history/ledger.1.avsc) wrote it
LEDGER_1 = {"record_id": "j1@1", "kind": "job", "tenant": "acme", "job_id": "j1", "fire_id": "j1@1",
            "nominal_time": 1_700_000_000_000, "decision": "fired", "reason": None,
            "lateness_ms": 12, "epoch": 3, "attempts": 1, "outcome": "succeeded",
            "status_code": 200, "error": None, "fired_at": 1_700_000_000_012,
            "completed_at": 1_700_000_000_050}
# the same bytes the Kafka Connect converter's JUnit test decodes: Python and Java agree on them
LEDGER_1_BYTES = (REPO_ROOT / "connectors" / "avro-converter" / "src" / "test" / "resources"
                  / "ledger-1-from-python.hex")


def test_a_ledger_entry_of_the_older_schema_reads_as_the_current_one_on_both_sides():
    data = encode_with_history("ledger.1.avsc", LEDGER_1)
    assert data.hex() == LEDGER_1_BYTES.read_text().strip()
    assert data[2:10] != codec().fingerprint("LedgerEntry")
    record = codec().decode(data)
    assert record["record_id"] == "j1@1" and record["status_code"] == 200
    assert (record["message_id"], record["campaign_id"], record["email"]) == (None, None, None)


def test_every_history_schema_is_an_older_version_of_a_current_one():
    """``schemas/history/<file>.<n>.avsc`` is a version of the record in ``schemas/<file>.avsc``:
    the codec and the Kafka Connect converter both read it into that record's current schema."""
    import json

    from streams.runtime.codec import SCHEMAS_DIR

    files = sorted((SCHEMAS_DIR / "history").glob("*.avsc"))
    assert {f.name for f in files} >= {"tenant.1.avsc", "ledger.1.avsc"}
    for file in files:
        name = json.loads(file.read_text())["name"]
        assert name in Codec().names, file.name
        stem = file.name.split(".")[0]
        assert json.loads((SCHEMAS_DIR / f"{stem}.avsc").read_text())["name"] == name, file.name


FIRED_VARYING = ("fired_ms", "decision", "epoch")


def _fired(**extra):
    return {"fire_id": "j1@2026-11-23T16:47:00.000Z", "job_id": "j1", "tenant": "t",
            "job_revision": 7, "nominal_ms": 1_795_452_420_000, "target": _job()["target"],
            **extra}


@pytest.mark.parametrize("extra", [
    {},  # the fields with defaults left out: frozen with their defaults, as encode fills them
    {"overlap": "skip", "retry_max_attempts": 9, "retry_initial_backoff_s": 0.5,
     "retry_max_backoff_s": 7.0, "redrives": 2},
])
def test_a_template_filled_late_encodes_exactly_like_encode(extra):
    template = codec().template("Fired", FIRED_VARYING)
    varying = {"fired_ms": 1_795_452_421_234, "decision": "missed_caught_up", "epoch": 41}
    filled = template.fill(template.freeze(_fired(**extra)), varying)
    assert filled == codec().encode("Fired", {**_fired(**extra), **varying})
    assert codec().decode(filled)["epoch"] == 41


def test_a_template_refuses_a_gapped_run_and_unknown_fields():
    with pytest.raises(SchemaError, match="contiguous"):
        codec().template("Fired", ("fired_ms", "epoch"))
    template = codec().template("Fired", FIRED_VARYING)
    with pytest.raises(SchemaError, match="colour"):
        template.freeze(_fired(colour="red"))
    with pytest.raises(SchemaError):
        template.fill(template.freeze(_fired()), {"fired_ms": 1, "decision": "fired"})


@pytest.mark.parametrize("field", ["job_id", "tenant"])
def test_a_leading_string_is_read_without_a_decode(field):
    job = {**_job(), "tenant": "tënant-" + "x" * 200}  # a two-byte length, non-ASCII text
    data = codec().encode("Job", job)
    assert codec().leading_string(data, "Job", field) == job[field]
    # the bytes after the field are never read: cut them off and the answer stays
    end = data.index(job["tenant"].encode()) + len(job["tenant"].encode())
    assert codec().leading_string(data[:end], "Job", field) == job[field]
    with pytest.raises(SchemaError):
        codec().decode(data[:end])


def test_a_field_after_other_types_is_read_by_a_whole_decode():
    # max_jobs is an int after an array: not reachable by skipping strings
    data = codec().encode("Tenant", {"tenant": "acme", "key_sha256": "ab", "allowed_targets": [],
                                     "max_jobs": 5, "min_interval_s": 1, "requests_per_s": 9,
                                     "created_ms": 1})
    assert codec().leading_string(data, "Tenant", "max_jobs") == "5"


def test_a_leading_string_refuses_another_record_and_truncated_bytes():
    data = codec().encode("Job", _job())
    with pytest.raises(SchemaError, match="where a Tenant was expected"):
        codec().leading_string(data, "Tenant", "tenant")
    with pytest.raises(SchemaError, match="known schema"):
        codec().leading_string(b"\x00" * 20, "Job", "tenant")
    with pytest.raises(SchemaError, match="truncated"):
        codec().leading_string(data[:13], "Job", "tenant")
    with pytest.raises(SchemaError, match="not UTF-8"):
        codec().leading_string(codec().encode("Job", {**_job(), "tenant": "ab"}).replace(
            b"\x04ab", b"\x04a\xff"), "Job", "tenant")


def test_leading_fields_are_read_without_the_rest_and_equal_a_whole_decode():
    record = {**_fired(), "fired_ms": 7, "decision": "fired", "epoch": 3}
    data = codec().encode("Fired", record)
    fields = ("fire_id", "tenant", "epoch")
    head = codec().decode_leading(data, "Fired", fields)
    whole = codec().decode(data)
    assert {f: head[f] for f in fields} == {f: whole[f] for f in fields}
    assert "target" not in head, "read no further than the last field asked for"
    # the bytes after the fields are never read: cut them off and the answer stays
    cut = data[:-40]
    assert codec().decode_leading(cut, "Fired", fields)["epoch"] == whole["epoch"]
    with pytest.raises(SchemaError, match="where a Job was expected"):
        codec().decode_leading(data, "Job", ("tenant",))
    assert codec().decode_leading(data, "Fired", ("no_such_field",)) == whole, \
        "a writer schema without the field is decoded whole"


def _named_types(node, defined: set[str], referenced: list[str]) -> None:
    """Every named type ``node`` defines (into ``defined``) and names before defining it."""
    if isinstance(node, str):
        if "." in node and node not in defined:
            referenced.append(node)
    elif isinstance(node, list):
        for item in node:
            _named_types(item, defined, referenced)
    elif isinstance(node, dict):
        if node.get("type") in ("record", "enum", "fixed") and "name" in node:
            from streams.runtime.codec import _full_name

            defined.add(_full_name(node))
        for key in ("type", "fields", "items", "values"):
            if key in node:
                _named_types(node[key], defined, referenced)


def test_every_history_schema_is_self_contained():
    """A history file writes the shared types it uses inline, as they were: a shared type that
    changes later (Target gained the sms fields) must not change an old version's fingerprint,
    and the Kafka Connect converter parses each history file on its own."""
    import json

    from streams.runtime.codec import SCHEMAS_DIR

    for file in sorted((SCHEMAS_DIR / "history").glob("*.avsc")):
        referenced: list[str] = []
        _named_types(json.loads(file.read_text()), set(), referenced)
        assert referenced == [], f"{file.name} names {referenced}: write them inline"


# every writer schema's fingerprint, once written: records in Kafka carry these, so a change to
# a history file (or to a shared type it named) would make them unreadable
HISTORY_FINGERPRINTS = {
    "dead_letter.1.avsc": "c4c459c3980f46c8", "fired.1.avsc": "4ddd886583bd2b87",
    "fired.2.avsc": "a9bc4714b6336605", "fired.3.avsc": "cc054d3b370494d3",
    "fired.4.avsc": "7e468e240432ad49", "job.1.avsc": "5ab1eddbc12de458",
    "job.2.avsc": "d75def1e7d64e72f", "job.3.avsc": "fad53f1232e2e478",
    "ledger.1.avsc": "d4413d2123f2c93e", "ledger.2.avsc": "d1ed6f821a4a3f08",
    "suppression.1.avsc": "f422b2463eb50fbe",
    "tenant.1.avsc": "44ac1e77abcd1bea", "tenant.2.avsc": "f70585b8b99876bf",
    "tenant.3.avsc": "3d66611d810efef2", "tenant.4.avsc": "6136ce3ae0caff73",
}


def test_history_fingerprints_never_change():
    import json

    import fastavro
    from fastavro.schema import to_parsing_canonical_form

    from streams.runtime.codec import SCHEMAS_DIR

    def parse(file):
        return fastavro.parse_schema(json.loads(file.read_text()))

    found = {f.name: f"{fingerprint64(to_parsing_canonical_form(parse(f))):016x}"
             for f in sorted((SCHEMAS_DIR / "history").glob("*.avsc"))}
    assert found == HISTORY_FINGERPRINTS


def test_a_job_written_before_the_sms_fields_reads_with_them_null():
    data = encode_with_history("job.2.avsc", _job())
    assert data[2:10] != codec().fingerprint("Job")
    target = codec().decode(data)["target"]
    assert target["type"] == _job()["target"]["type"]
    assert all(target[name] is None for name in ("sms_to", "sms_body", "sms_origination",
                                                 "sms_quiet_start", "sms_quiet_end",
                                                 "sms_quiet_timezone"))


def test_a_job_written_before_reminders_reads_with_no_channels():
    """schemas/history/job.3.avsc predates the reminder target's fields: an older job's target
    is read with them null (``streams.execution.reminders.channels_of``: none)."""
    data = encode_with_history("job.3.avsc", _job())
    assert data[2:10] != codec().fingerprint("Job")
    target = codec().decode(data)["target"]
    assert target["reminder_channels"] is None and target["reminder_deliver"] is None


def test_a_ledger_entry_written_before_channels_reads_with_none():
    old = {**LEDGER_1, "message_id": None, "campaign_id": None, "email": None}
    data = encode_with_history("ledger.2.avsc", old)
    assert data[2:10] != codec().fingerprint("LedgerEntry")
    assert codec().decode(data)["channel"] is None


def test_a_tenant_written_before_sms_originations_reads_with_none_granted():
    """schemas/history/tenant.4.avsc predates ``sms_originations``: its tenants send no text
    (``streams.adapters.tenants.sms_refused``) until the operator grants one."""
    data = encode_with_history("tenant.4.avsc", {
        "tenant": "acme", "key_sha256": "ab", "allowed_targets": [], "max_jobs": 5,
        "min_interval_s": 1, "requests_per_s": 9, "senders": ["acme.example"],
        "max_fires_per_s": 7, "created_ms": 1})
    assert data[2:10] != codec().fingerprint("Tenant")
    record = codec().decode(data)
    assert record["sms_originations"] == [] and record["max_fires_per_s"] == 7
    assert record["senders"] == ["acme.example"]
