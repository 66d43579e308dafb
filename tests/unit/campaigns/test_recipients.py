import json

from hypothesis import given
from hypothesis import strategies as st

from streams.campaigns.recipients import (
    CHUNK,
    BadRow,
    Chunker,
    CsvRows,
    Lines,
    NdjsonRows,
    Row,
    normalise,
    parse,
    template_data,
)


@given(st.dictionaries(st.text(), st.text(), max_size=8))
def test_template_data_is_what_json_dumps_writes(variables):
    assert template_data(variables) == json.dumps(variables)


def test_csv_rows_with_variables_and_bad_lines():
    lines = ["email,name", "Ada@Example.com,Ada", "not-an-email,Bob", "x@y.org", "",
             "c@d.io,\"Carl, Jr\"", "e@f.io,\"unclosed"]
    items = list(parse(CsvRows(), lines))
    rows = [i for i in items if isinstance(i, Row)]
    bad = {i.line: i.reason for i in items if isinstance(i, BadRow)}
    assert [(r.line, r.email, r.vars) for r in rows] == [
        (2, "ada@example.com", {"name": "Ada"}), (6, "c@d.io", {"name": "Carl, Jr"})]
    assert set(bad) == {3, 4, 7}
    assert "invalid email" in bad[3] and "expected 2 fields" in bad[4]


def test_csv_without_email_header_is_one_bad_row():
    assert [(b.line, b.reason) for b in parse(CsvRows(), ["name", "a@b.co"])] == [
        (1, "header has no 'email' column")]
    assert [b.line for b in parse(CsvRows(), [])] == [1]


def test_ndjson_rows():
    lines = ['{"email": "a@b.co", "n": 1}', "{broken", "[1]", '{"name": "x"}']
    items = list(parse(NdjsonRows(), lines))
    assert isinstance(items[0], Row) and items[0].vars == {"n": "1"}
    assert [(i.line, type(i).__name__) for i in items[1:]] == [
        (2, "BadRow"), (3, "BadRow"), (4, "BadRow")]


def test_normalise():
    assert normalise("  Ada@Example.COM ") == "ada@example.com"
    for bad in ("", "a@", "@b.c", "a b@c.d", "a@b", "a@-b.com", "x" * 250 + "@b.co"):
        assert normalise(bad) is None, bad


def test_chunker_groups_by_partition_and_drops_duplicates():
    chunker = Chunker(partitions=4, seen={})
    full = []
    for i in range(500):
        result = chunker.add(Row(i, f"user{i % 300}@example.com", {}))
        if result:
            full.append(result)
    rest = chunker.rest()
    assert chunker.accepted == 300 and chunker.duplicates == 200
    chunks = full + rest
    assert all(len(rows) <= CHUNK for _, rows in chunks)
    assert sum(len(rows) for _, rows in chunks) == 300
    from streams.topology import partition_for
    assert all(partition_for(r.email, 4) == part for part, rows in chunks for r in rows)


def test_lines_hold_no_more_than_the_limit_of_a_line_however_it_arrives():
    lines = Lines(limit=8)
    assert lines.feed(b"a@b.c\nx") == [b"a@b.c"]
    assert lines.feed(b"yz\n") == [b"xyz"]
    assert lines.feed(b"0123456789" * 1000) == [], "a line over the limit is not kept"
    assert len(lines._pending) <= 8
    assert lines.feed(b"more\nok\n") == [None, b"ok"], "reported once, at its end"
    assert lines.feed(b"12345678") == [] and lines.end() == [b"12345678"], "the limit itself is fine"
    tail = Lines(limit=4)
    tail.feed(b"toolong")
    assert tail.end() == [None]
