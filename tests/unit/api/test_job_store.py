"""The jobs view's store: each job's state and next run kept beside it, current as time passes,
and the per-state counts and pages a list at ten million jobs reads (``api.job_store``)."""

from __future__ import annotations

import base64

import pytest

from api.job_store import (
    STILL_DUE_RECHECK_MS,
    JobStore,
    decode_cursor,
    encode_cursor,
    facets_of,
)
from streams.runtime.codec import codec
from streams.runtime.record_stores import Checkpoint

MIN = 60_000
NOW = 1_800_000_000_000 - 1_800_000_000_000 % MIN  # on a minute


def _job(job_id: str, tenant: str = "acme", *, cron: str | None = "* * * * *",
         at_ms: int | None = None, paused: bool = False, name: str | None = None,
         jitter_s: int = 0, revision: int = 1, labels: dict | None = None) -> dict:
    return {"job_id": job_id, "tenant": tenant, "revision": revision, "paused": paused,
            "name": name, "jitter_s": jitter_s, "labels": labels or {},
            "schedule": {"cron": None if at_ms else cron, "at_ms": at_ms, "timezone": "UTC"},
            "target": {"type": "kafka", "topic": f"{tenant}.t", "value": "v"},
            "created_ms": 1, "updated_ms": 1}


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path, clock):
    opened = JobStore(tmp_path / "jobs.sqlite3", clock)
    opened.resume(Checkpoint("t", {}, {0: 10}, 86_400_000, NOW))
    yield opened
    opened.close()


def _put(store: JobStore, *jobs: dict) -> None:
    store.write([store.prepare(j["job_id"], codec().encode("Job", j)) for j in jobs], {})


def test_facets_say_a_cron_jobs_next_run_and_that_it_goes_stale_then():
    f = facets_of(_job("j"), NOW + 1)
    assert (f.state, f.next_ms, f.stale_ms) == ("active", NOW + MIN, NOW + MIN)
    assert facets_of(_job("j", paused=True), NOW + 1).state == "paused"


def test_a_one_off_is_completed_after_its_slot_and_then_never_stale():
    one_off = _job("j", at_ms=NOW + 5000)
    before = facets_of(one_off, NOW)
    assert (before.state, before.next_ms, before.stale_ms) == ("active", NOW + 5000, NOW + 5000)
    after = facets_of(one_off, NOW + 5001)
    assert (after.state, after.next_ms, after.stale_ms) == ("completed", 0, None)


def test_a_slot_still_due_after_its_nominal_time_is_looked_at_again_until_completed():
    """Jitter delays a one-off past its nominal time: the view says ``active`` until it is due,
    so the facets must not wait for a next slot there is none of."""
    jittery = _job("j", at_ms=NOW, jitter_s=3600)
    f = facets_of(jittery, NOW + 1)  # its fire id draws a jitter of more than a millisecond
    assert (f.state, f.next_ms) == ("active", 0) and f.stale_ms > NOW + 1
    ending = {**_job("ending", jitter_s=59),
              "schedule": {"cron": "* * * * *", "timezone": "UTC", "at_ms": None,
                           "end_ms": NOW}}
    last = facets_of(ending, NOW + 1)  # a schedule's last slot: looked at again a second on
    assert (last.state, last.stale_ms) == ("active", NOW + 1 + STILL_DUE_RECHECK_MS)
    assert facets_of(jittery, NOW + 3_600_001).state == "completed"


def test_counts_per_state_follow_writes_changes_and_deletes(store):
    _put(store, _job("a"), _job("b"), _job("c", paused=True), _job("d", at_ms=NOW - 1),
         _job("x", tenant="other"))
    assert store.state_counts("acme") == {"active": 2, "paused": 1, "completed": 1}
    _put(store, _job("a", paused=True, revision=2))
    store.write([("b", None)], {})
    assert store.state_counts("acme") == {"active": 0, "paused": 2, "completed": 1}
    assert store.state_counts("other") == {"active": 1, "paused": 0, "completed": 0}


def test_time_passing_completes_a_one_off_and_moves_the_next_runs_once_refreshed(store, clock):
    _put(store, _job("soon", at_ms=NOW + 2000), _job("cron"))
    assert [k for k, _ in store.by_next_run("acme", "active", None, 10)] == ["soon", "cron"]
    clock.now = NOW + MIN + 1
    assert store.refresh() == 2  # both stale: the one-off's slot and the cron's passed
    assert store.state_counts("acme") == {"active": 1, "paused": 0, "completed": 1}
    assert store.by_next_run("acme", "active", None, 10) == [("cron", NOW + 2 * MIN)]
    assert store.by_next_run("acme", "completed", None, 10) == [("soon", 0)]
    assert store.refresh() == 0  # nothing stale until the next minute


def test_pages_by_next_run_follow_their_cursor_without_repeats_or_gaps(store):
    jobs = [_job(f"j{i:02}", at_ms=NOW + (i % 5) * 1000 + 1000) for i in range(20)]
    _put(store, *jobs)
    seen, after = [], None
    while True:
        page = store.by_next_run("acme", "active", after, 6)
        seen += page
        if len(page) < 6:
            break
        after = (page[-1][1], page[-1][0])
    assert seen == sorted(((j["job_id"], j["schedule"]["at_ms"]) for j in jobs),
                          key=lambda kv: (kv[1], kv[0]))


def test_names_are_listed_by_prefix_in_name_order_and_within_a_state(store):
    _put(store, _job("1", name="nightly-b"), _job("2", name="nightly-a", paused=True),
         _job("3", name="hourly"), _job("4", name="nightly-c", tenant="other"))
    assert store.by_name("acme", "nightly", None, None, 10) == (
        [("2", "nightly-a"), ("1", "nightly-b")], None)
    assert store.by_name("acme", "nightly", "active", None, 10) == ([("1", "nightly-b")], None)
    assert store.by_name("acme", "nightly", None, ("nightly-a", "2"), 10) == (
        [("1", "nightly-b")], None)
    assert store.by_name("acme", "nightly", None, None, 1) == (
        [("2", "nightly-a")], ("nightly-a", "2"))


def test_labels_are_found_from_their_index_with_a_state_and_a_name(store, clock):
    _put(store, _job("a", labels={"team": "ops", "tier": "1"}, name="nightly"),
         _job("b", labels={"team": "ops"}, paused=True),
         _job("c", labels={"team": "web", "tier": "1"}),
         _job("d", at_ms=NOW + 1000, labels={"team": "ops"}),
         _job("x", tenant="other", labels={"team": "ops"}))
    assert store.by_labels("acme", [("team", "ops")], None, None, None, 10)[0] == ["a", "b", "d"]
    assert store.by_labels("acme", [("tier", None), ("team", "ops")], None, None, None, 10)[0] \
        == ["a"]
    assert store.by_labels("acme", [("team", "ops")], "paused", None, None, 10)[0] == ["b"]
    assert store.by_labels("acme", [("team", None)], None, "night", None, 10)[0] == ["a"]
    assert store.by_labels("acme", [("team", "ops")], None, None, "a", 1)[0] == ["b"]
    _put(store, _job("a", labels={"team": "web"}, revision=2))  # a change moves it
    assert store.by_labels("acme", [("team", "ops")], None, None, None, 10)[0] == ["b", "d"]
    clock.now = NOW + 2000
    store.refresh()  # d completed: its facets rewritten, its labels kept
    assert store.by_labels("acme", [("team", "ops")], "completed", None, None, 10)[0] == ["d"]
    store.write([("b", None)], {})
    assert store.by_labels("acme", [("team", "ops")], None, None, None, 10)[0] == ["d"]


def test_a_rebuilt_store_forgets_the_facets_with_the_records(store):
    _put(store, _job("a"))
    store.resume(Checkpoint("another-topic", {}, {0: 10}, 86_400_000, NOW))
    assert store.state_counts("acme") == {"active": 0, "paused": 0, "completed": 0}
    assert store.by_next_run("acme", "active", None, 10) == []


def test_a_cursor_reads_back_only_as_the_kind_it_was_made():
    assert decode_cursor(encode_cursor(5, "k"), (int, str)) == (5, "k")
    forged = [encode_cursor(2**70, "k"), encode_cursor(5, "\ud800"),  # SQLite takes neither
              base64.urlsafe_b64encode(b"[" * 1400).decode(),  # json.loads recurses too deep
              "A" * 3000]
    for bad in ("", "nonsense!", encode_cursor("a", "k"), encode_cursor(5), *forged):
        with pytest.raises(ValueError):
            decode_cursor(bad, (int, str))


@pytest.mark.parametrize("job", [
    _job("cron"), _job("paused", paused=True), _job("once", at_ms=NOW + 30_000),
    _job("jittery", at_ms=NOW, jitter_s=60), _job("jittery-cron", jitter_s=59),
    {**_job("ending"), "schedule": {"cron": "* * * * *", "timezone": "UTC", "at_ms": None,
                                    "end_ms": NOW + 2 * MIN}},
], ids=lambda j: j["job_id"])
def test_the_facets_state_is_the_job_views_at_every_moment(job):
    """A list filtered by state agrees with the ``state`` each listed job shows."""
    from streams.scheduling import slots

    for at in range(NOW - MIN, NOW + 5 * MIN, 7_000):
        assert facets_of(job, at).state == slots.job_state(job, at), at


def test_the_refresher_brings_the_facets_to_now_on_its_own(store, clock):
    """No read needed: the API's thread recomputes what went stale, so a list never has a
    backlog of a day's slots to recompute first."""
    import threading

    from api.job_store import Refresher

    _put(store, _job("soon", at_ms=NOW + 1000))
    clock.now = NOW + 2000
    refreshed = threading.Event()
    original = store.refresh

    def refresh(now: int | None = None, most: int | None = None, stopping=lambda: False) -> int:
        done = original(now, most, stopping)
        if done:
            refreshed.set()
        return done

    store.refresh = refresh  # type: ignore[method-assign]
    refresher = Refresher(store, every_s=0.01).start()
    try:
        assert refreshed.wait(10), "the refresher never ran"
    finally:
        refresher.stop()
    assert store.state_counts("acme")["completed"] == 1


def test_a_filter_checked_row_by_row_reads_a_bounded_range_a_page(store, monkeypatch):
    """A label with a rare state (or a name prefix with one): short pages with a cursor, each
    reading at most ``SCAN`` rows under the store's lock, together every match once."""
    import api.job_store as job_store

    monkeypatch.setattr(job_store, "SCAN", 4)
    _put(store, *[_job(f"j{i:02}", name=f"n{i:02}", labels={"team": "ops"}, paused=i in (1, 9))
                  for i in range(12)])
    pages, after = [], None
    while True:
        keys, after = store.by_labels("acme", [("team", "ops")], "paused", None, after, 10)
        pages.append(keys)
        if after is None:
            break
    assert pages == [["j01"], [], ["j09"], []]  # 4 rows a page: j00-03, j04-07, j08-11, none
    named, after2 = [], None
    while True:
        page, after2 = store.by_name("acme", "n", "paused", after2, 10)
        named += [key for key, _ in page]
        if after2 is None:
            break
    assert named == ["j01", "j09"]


def test_a_held_one_off_is_looked_at_again_when_it_completes_not_every_second():
    """A one-off still due past its nominal time (here: jitter) goes stale the moment the job
    view calls it completed: a text held through ten hours of quiet hours is one recompute,
    not 36,000."""
    from streams.scheduling import slots

    jittery = _job("j", at_ms=NOW, jitter_s=3600)
    f = facets_of(jittery, NOW + 1)
    assert f.state == "active" and f.stale_ms is not None
    assert slots.job_state(jittery, f.stale_ms - 1) == "active"
    assert slots.job_state(jittery, f.stale_ms) == "completed"


def test_a_record_whose_schedule_cannot_be_read_is_listed_not_a_stuck_view(store, caplog):
    """Written to the topic past the API's checks (an unknown zone): the view stores it (its
    batch would otherwise be retried for ever), listed by its paused flag with no next run,
    and a warning names it."""
    broken = {**_job("broken", paused=True),
              "schedule": {"cron": "* * * * *", "timezone": "Mars/Olympus", "at_ms": None}}
    _put(store, broken, _job("fine"))
    assert store.state_counts("acme") == {"active": 1, "paused": 1, "completed": 0}
    assert store.by_next_run("acme", "paused", None, 10) == [("broken", 0)]
    assert "job broken tenant acme: schedule unreadable" in caplog.text


def test_a_refresh_stops_at_its_most_or_when_told(store, clock):
    _put(store, *[_job(f"j{i}", at_ms=NOW + 1000) for i in range(5)])
    clock.now = NOW + 2000
    assert store.refresh(most=1) == 5  # one chunk (up to 500) at least: then it stops
    _put(store, *[_job(f"k{i}", at_ms=NOW + 3000) for i in range(5)])
    clock.now = NOW + 4000
    assert store.refresh(stopping=lambda: True) == 0
    assert store.state_counts("acme")["completed"] == 5
