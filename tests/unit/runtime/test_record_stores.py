"""The views' state stores: what a restarted API resumes from, and the tenant index it lists."""

import threading

import pytest
from confluent_kafka import KafkaError, Message

from streams.runtime.codec import SchemaError, codec
from streams.runtime.record_stores import Checkpoint, MemoryStore, SqliteStore
from streams.runtime.topic_view import TopicView
from streams.topology import JOBS

DAY_MS = 86_400_000
NOW = 1_800_000_000_000


def _at(source="topic-a", ends=None, starts=None, now=NOW, kept=DAY_MS):
    return Checkpoint(source=source, starts=starts or {}, ends=ends or {0: 100, 1: 100},
                      tombstones_kept_ms=kept, now_ms=now)


def _job(job_id: str, tenant: str, revision: int = 1) -> dict:
    return {"job_id": job_id, "tenant": tenant, "revision": revision, "paused": False,
            "schedule": {"cron": "* * * * *", "timezone": "UTC"},
            "target": {"type": "kafka", "topic": f"{tenant}.t", "value": "v"},
            "created_ms": 1, "updated_ms": 1}


def _rows(store, *changes):
    return [store.prepare(key, None if job is None else codec().encode("Job", job))
            for key, job in changes]


@pytest.fixture
def store(tmp_path):
    opened = SqliteStore(tmp_path / "jobs.sqlite3", "Job", "tenant")
    assert opened.resume(_at()) == {}
    yield opened
    opened.close()


def test_a_batch_applies_in_order_and_checkpoints_its_positions(store, tmp_path):
    store.write(_rows(store, ("j1", _job("j1", "acme")), ("j2", _job("j2", "acme")),
                      ("j1", _job("j1", "acme", revision=2)), ("j2", None)), {0: 4})
    store.mark_current(NOW)
    assert store.get("j1")["revision"] == 2
    assert store.get("j2") is None
    assert len(store) == 1
    store.close()
    reopened = SqliteStore(tmp_path / "jobs.sqlite3", "Job", "tenant")
    assert reopened.resume(_at(ends={0: 10, 1: 0}, now=NOW + DAY_MS // 2)) == {0: 4}
    assert reopened.get("j1")["revision"] == 2
    reopened.close()


def test_a_tenant_is_listed_in_pages_and_counted(store):
    jobs = [(f"j{i:03d}", _job(f"j{i:03d}", "acme" if i % 3 else "other")) for i in range(30)]
    store.write(_rows(store, *jobs), {0: 30})
    acme = sorted(k for k, j in jobs if j["tenant"] == "acme")
    first = store.keys_for("acme", None, 7)
    assert first == acme[:7]
    assert store.keys_for("acme", first[-1], 100) == acme[7:]
    assert store.count_for("acme") == 20 and store.count_for("other") == 10
    assert store.keys_for("nobody", None, 10) == [] and store.count_for("nobody") == 0


def test_counts_follow_changes_of_tenant_deletes_and_repeats_within_a_batch(store):
    store.write(_rows(store, ("j1", _job("j1", "acme")), ("j2", _job("j2", "acme"))), {0: 2})
    store.write(_rows(store, ("j1", _job("j1", "acme", revision=2)),  # a change, same tenant
                      ("j2", _job("j2", "other")),  # moved to another tenant
                      ("j3", _job("j3", "acme")), ("j3", None),  # born and gone in one batch
                      ("j4", None)), {0: 7})  # a tombstone of a key never seen
    assert (store.count_for("acme"), store.count_for("other")) == (1, 1)
    store.write(_rows(store, ("j1", None), ("j2", None)), {0: 9})
    assert (store.count_for("acme"), store.count_for("other")) == (0, 0)


def test_a_count_is_read_while_a_batch_holds_the_writer_without_waiting_for_it(store):
    """The API's quota check reads it on the event loop: behind the writer's lock, every request
    waited for an import's batch. It reads the last commit instead."""
    store.write(_rows(store, ("j1", _job("j1", "acme")), ("j2", _job("j2", "acme"))), {0: 2})
    counted: list[int] = []
    with store._lock:  # noqa: SLF001 - a batch being written
        reader = threading.Thread(target=lambda: counted.append(store.count_for("acme")))
        reader.start()
        reader.join(5)
        assert counted == [2], "the count waited for the writer"
    store.write(_rows(store, ("j3", _job("j3", "acme"))), {0: 3})
    assert store.count_for("acme") == 3  # the next commit is read


def test_a_local_write_is_read_back_and_indexed_before_the_topic_delivers_it(store):
    store.put("j1", _job("j1", "acme"))
    assert store.get("j1")["tenant"] == "acme" and store.keys_for("acme", None, 5) == ["j1"]
    store.put("j1", None)
    assert store.get("j1") is None and store.count_for("acme") == 0


@pytest.mark.parametrize("checkpoint", [
    _at(source="topic-b"), _at(ends={0: 2}), _at(starts={0: 4}),
    _at(now=NOW + DAY_MS // 2 + 1), _at(now=NOW + 7 * DAY_MS // 2 + 1, kept=7 * DAY_MS),
], ids=["another topic id", "past the end", "before the start (records deleted unread)",
        "current too long ago: a tombstone may be gone", "the same with a week's retention"])
def test_a_checkpoint_that_cannot_be_trusted_is_thrown_away(store, checkpoint):
    store.write(_rows(store, ("j1", _job("j1", "acme"))), {0: 3})
    store.mark_current(NOW)
    assert store.resume(checkpoint) == {}
    assert store.get("j1") is None and len(store) == 0 and store.count_for("acme") == 0
    store.mark_current(NOW)
    assert store.resume(_at(source=checkpoint.source)) == {}  # the new source is remembered


def test_a_checkpoint_is_kept_while_tombstones_are_and_only_once_the_view_was_current(store):
    store.write(_rows(store, ("j1", _job("j1", "acme"))), {0: 3})
    assert store.resume(_at()) == {}  # killed in its first catch-up: never current
    store.write(_rows(store, ("j1", _job("j1", "acme"))), {0: 3})
    store.mark_current(NOW)
    assert store.resume(_at(now=NOW + DAY_MS // 2, kept=DAY_MS)) == {0: 3}
    assert store.resume(_at(now=NOW + 5 * DAY_MS, kept=30 * DAY_MS)) == {0: 3}


def test_a_file_that_is_not_a_database_is_rebuilt(tmp_path):
    path = tmp_path / "jobs.sqlite3"
    path.write_bytes(b"this is not a SQLite file" * 100)
    store = SqliteStore(path, "Job", "tenant")
    assert store.resume(_at()) == {}
    store.close()


def test_a_file_of_another_layout_is_rebuilt(tmp_path):
    """A store written by an older cronstream (format 1 kept no counts) would otherwise resume
    from its checkpoint with a quota count of zero."""
    import sqlite3

    path = tmp_path / "jobs.sqlite3"
    store = SqliteStore(path, "Job", "tenant")
    store.resume(_at())
    store.write(_rows(store, ("j1", _job("j1", "acme"))), {0: 1})
    store.mark_current(NOW)
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 1")
    reopened = SqliteStore(path, "Job", "tenant")
    assert reopened.resume(_at()) == {} and reopened.get("j1") is None
    reopened.close()


def test_unreadable_bytes_are_refused_before_they_reach_the_store(store):
    with pytest.raises(SchemaError):
        store.prepare("j1", b"garbage bytes, not avro")
    with pytest.raises(SchemaError):
        MemoryStore().prepare("j1", codec().encode("Job", _job("j1", "acme"))[:15])


def test_the_memory_store_tells_its_index_every_change():
    seen = []
    store = MemoryStore(lambda key, value: seen.append((key, value and value["tenant"])))
    store.write(_rows(store, ("j1", _job("j1", "acme")), ("j1", None)), {0: 2})
    assert seen == [("j1", "acme"), ("j1", None)] and store.get("j1") is None
    assert store.resume(_at()) == {}  # nothing kept across processes


def test_a_view_stores_a_batch_skips_unreadable_records_and_counts_them_read(store, caplog):
    """``TopicView._apply``: records are stored before their offsets count as read, an
    unreadable one is logged with its partition and offset and passed over, and an end of
    partition is reported with its offset."""
    view = TopicView("127.0.0.1:1", JOBS, store)  # never started: nothing connects
    good = codec().encode("Job", _job("j1", "acme"))
    bad_utf8 = good.replace(b"acme", b"ac\xffe")
    ends = view._apply([
        Message(topic=JOBS.name, partition=0, offset=7, key=b"j1", value=good),
        Message(topic=JOBS.name, partition=1, offset=3, key=b"j9", value=bad_utf8),
        Message(topic=JOBS.name, partition=1, offset=4,
                error=KafkaError(KafkaError._PARTITION_EOF)),
    ])
    assert ends == {1: 4}
    assert view.positions == {0: 8, 1: 4}
    assert store.get("j1")["tenant"] == "acme" and store.get("j9") is None
    assert "partition 1 offset 3 (key j9) unreadable" in caplog.text
    store.mark_current(NOW)
    assert store.resume(_at()) == {0: 8, 1: 4}  # the positions went in with the rows


def test_a_record_the_store_holds_already_is_not_prepared_again_and_a_batch_ends_as_its_last(
        store, monkeypatch):
    """The API's own import writes come back on the jobs topic byte for byte: the view passes
    them over (``holding``) without decoding them; a key written twice in a batch ends as its
    last record even when that one is what the store held before."""
    view = TopicView("127.0.0.1:1", JOBS, store)
    v1, v2 = (codec().encode("Job", _job("j1", "acme", revision=r)) for r in (1, 2))
    store.put("j1", _job("j1", "acme", revision=2))  # the API wrote it as it accepted it
    store.put("j2", _job("j2", "acme"))
    prepared: list[str] = []
    real = store.prepare
    monkeypatch.setattr(store, "prepare", lambda key, value: prepared.append(key) or real(key, value))
    view._apply([
        Message(topic=JOBS.name, partition=0, offset=0, key=b"j1", value=v2),  # the copy
        Message(topic=JOBS.name, partition=0, offset=1, key=b"j3", value=None),  # nothing held
    ])
    assert prepared == [] and view.positions == {0: 2}, "held already: counted read, not redone"
    view._apply([
        Message(topic=JOBS.name, partition=0, offset=2, key=b"j1", value=v1),
        Message(topic=JOBS.name, partition=0, offset=3, key=b"j1", value=v2),
        Message(topic=JOBS.name, partition=0, offset=4, key=b"j2", value=None),
    ])
    assert store.get("j1")["revision"] == 2, "the batch's last record of j1 is the one held"
    assert store.get("j2") is None and prepared == ["j2"]
    assert store.holding({"j1": v2, "j2": None, "j4": v1}) == {"j1", "j2"}
