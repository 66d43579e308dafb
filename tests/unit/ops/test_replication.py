"""MirrorMaker 2's lag as ``ops.replication`` reads it, and the configuration ``stack.mirror``
writes (docs/regions.md, "Replication")."""

from __future__ import annotations

import json
import re

from ops import replication
from stack import mirror
from streams.topology import MIRROR_GROUPS, MIRROR_TOPICS, mirror_offsets_topic, mirrored_topics


def offset_record(topic: str, part: int, offset: int | None, cluster: str = "a",
                  connector: str = "MirrorSourceConnector") -> tuple[bytes, bytes | None]:
    key = json.dumps([connector, {"cluster": cluster, "partition": part, "topic": topic}])
    return key.encode(), None if offset is None else json.dumps({"offset": offset}).encode()


def test_the_copied_offset_is_the_last_committed_record_of_our_source_plus_one():
    records = [offset_record("cronstream.jobs", 0, 4), offset_record("cronstream.jobs", 0, 9),
               offset_record("cronstream.fired", 2, 0), offset_record("cronstream.fired", 3, 5),
               offset_record("cronstream.fired", 3, None),  # a tombstone forgets it
               offset_record("cronstream.jobs", 1, 7, cluster="b"),  # the other direction's
               offset_record("cronstream.jobs", 1, 7, connector="Other"),
               (b"not json", b"{}"), (None, b"{}")]
    assert replication.copied_through(records, "a") == {("cronstream.jobs", 0): 10,
                                                        ("cronstream.fired", 2): 1}


def test_lag_is_end_minus_copied_and_its_age_that_of_the_oldest_record_not_copied():
    ends = {("t", 0): 10, ("t", 1): 5, ("t", 2): 3}
    copied = {("t", 0): 10, ("t", 1): 2}  # partition 2: nothing copied yet
    stamps = {("t", 1, 2): 7_000, ("t", 2, 0): 4_000}
    rows = replication.lag_rows(ends, copied, stamps, now_ms=10_000)
    assert [(r.partition, r.copied, r.lag, r.time_lag_s) for r in rows] == [
        (0, 10, 0, 0.0), (1, 2, 3, 3.0), (2, 0, 3, 6.0)]
    assert replication.summary(rows) == (6, 6.0)
    table = replication.table(rows)
    assert "t      1          5           2       3    3.0" in table
    assert table.endswith("replication lag: 6 records over 3 partitions, oldest 6.0 s")
    assert replication.table(rows[:1]) == ("replication lag: 0 records over 1 partitions, "
                                           "oldest 0.0 s")


def java_properties(text: str) -> dict[str, str]:
    """What java.util.Properties reads from ``key = value`` lines: a backslash escapes the next
    character (``\\\\`` is one backslash; ``\\.`` a dot)."""
    out = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = re.sub(r"\\(.)", r"\1", value.strip())
    return out


def test_mirrormaker_copies_every_topic_and_changelog_under_its_name_and_not_connects_own():
    props = java_properties(mirror.properties("a", "b", "h:1", "h:2", ["security.protocol=SSL"],
                                              ["security.protocol=SASL_SSL"]))
    assert props["a->b.topics"] == MIRROR_TOPICS and props["a->b.groups"] == MIRROR_GROUPS
    topics = re.compile(props["a->b.topics"])
    named = mirrored_topics()
    assert "cronstream-send-chunks-changelog" in named and "cronstream.recipients" in named
    assert "cronstream-fires-done-changelog" in named and "cronstream.ledger" in named
    for internal in ("cronstream-connect-configs", "cronstream-connect-offsets",
                     "cronstream-__assignor-__leader", "t43.orders"):
        assert not topics.fullmatch(internal), internal
    groups = re.compile(props["a->b.groups"])
    assert all(groups.fullmatch(g) for g in ("cronstream", "cronstream-executor",
                                             "connect-cronstream-ledger-sink"))
    assert not groups.fullmatch("cronstream-view-1")
    assert props["replication.policy.class"].endswith("IdentityReplicationPolicy")
    assert (props["a->b.enabled"], props["b->a.enabled"]) == ("true", "false")
    assert props["offset-syncs.topic.location"] == "target"
    assert props["b.offset.flush.interval.ms"] == "1000"
    assert (props["a.security.protocol"], props["b.security.protocol"]) == ("SSL", "SASL_SSL")
    assert mirror_offsets_topic("a") == "mm2-offsets.a.internal"
