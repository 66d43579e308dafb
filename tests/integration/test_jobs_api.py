"""The jobs API on the real stack: auth, tenancy, idempotency, CRUD, pause/resume, trigger,
backfill, preview, runs, and bad input."""

from __future__ import annotations

import os
import signal
import threading
from datetime import UTC, datetime, timedelta

import httpx

from cli.demo import Receiver
from streams.runtime.codec import codec
from streams.scheduling.schedule import fire_id
from streams.topology import LEDGER
from tests.conftest import cluster_partitions, free_port, make_client
from tests.integration.helpers import (
    executor_caught_up,
    fired_slot,
    ledger,
    sigkill,
    sink_caught_up,
    worker_metrics,
)
from tests.waiting import wait_for

# the reconciler's lag of the worker restarted in the every-second test (CRONSTREAM_RECONCILER_LAG_S)
RECONCILE_LAG_S = 15


def prepared(stack) -> float:
    """Slots the workers hold prepared ahead of their second (``cronstream_slots_prepared``)."""
    return sum(worker_metrics(stack, "cronstream_slots_prepared").values())


def webhook(port: int) -> dict:
    return {"type": "webhook", "url": f"http://127.0.0.1:{port}/hook"}


def job_body(port: int, cron: str = "0 0 1 1 *", **extra) -> dict:
    return {"schedule": {"cron": cron}, "target": webhook(port), **extra}


def test_lists_by_state_follow_the_clock_on_the_api_process(api):
    """The API process's own view and refresher: a one-off due in two seconds is listed active
    and soonest first, then completed once its time has passed, with no write in between; the
    counts per state follow. (The store's logic is tests/unit/api/test_job_store.py's.)"""
    soon = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
    once = api.post("/v1/jobs", json={**job_body(9), "schedule": {"at": soon}}).json()
    yearly = api.post("/v1/jobs", json=job_body(9, labels={"team": "ops"})).json()
    active = api.get("/v1/jobs", params={"state": "active"}).json()
    assert [j["id"] for j in active["items"]] == [once["id"], yearly["id"]]
    assert active["counts"] == {"active": 2, "paused": 0, "completed": 0}

    def completed() -> list[str]:
        page = api.get("/v1/jobs", params={"state": "completed"}).json()
        return [j["id"] for j in page["items"]]

    assert wait_for(completed, timeout_s=30) == [once["id"]]
    assert api.get("/v1/jobs", params={"label": "team:ops", "state": "active"}
                   ).json()["items"][0]["id"] == yearly["id"]
    assert api.get("/v1/jobs").json()["counts"] == {"active": 1, "paused": 0, "completed": 1}


def test_auth_is_required_and_tenants_are_isolated(stack, api):
    created = api.post("/v1/jobs", json=job_body(9)).json()
    anonymous = httpx.get(f"{stack.s.api_url}/v1/jobs/{created['id']}")
    assert anonymous.status_code == 401
    wrong = httpx.get(f"{stack.s.api_url}/v1/jobs", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    with make_client(stack) as other:
        assert other.get(f"/v1/jobs/{created['id']}").status_code == 404
        assert other.put(f"/v1/jobs/{created['id']}", json=job_body(9)).status_code == 404
        assert other.delete(f"/v1/jobs/{created['id']}").status_code == 404
        assert other.post(f"/v1/jobs/{created['id']}/trigger").status_code == 404
        assert other.get(f"/v1/jobs/{created['id']}/runs").status_code == 404
        assert created["id"] not in [j["id"] for j in other.get("/v1/jobs").json()["items"]]
    assert api.get(f"/v1/jobs/{created['id']}").status_code == 200


def test_idempotency_key(api):
    headers = {"Idempotency-Key": "create-once-42"}
    first = api.post("/v1/jobs", json=job_body(9), headers=headers)
    again = api.post("/v1/jobs", json=job_body(9), headers=headers)
    assert first.status_code == 201 and again.status_code == 200
    assert first.json()["id"] == again.json()["id"]
    assert again.headers["Idempotent-Replayed"] == "true"
    other_body = api.post("/v1/jobs", json=job_body(9, cron="5 0 1 1 *"), headers=headers)
    assert other_body.status_code == 409
    ids = [j["id"] for j in api.get("/v1/jobs").json()["items"]]
    assert ids.count(first.json()["id"]) == 1


def test_crud_list_paging_and_preview(api):
    ids = sorted(api.post("/v1/jobs", json=job_body(9)).json()["id"] for _ in range(5))
    page1 = api.get("/v1/jobs", params={"limit": 3}).json()
    page2 = api.get("/v1/jobs", params={"limit": 3, "cursor": page1["next_cursor"]}).json()
    assert [j["id"] for j in page1["items"] + page2["items"]] == ids
    assert page2["next_cursor"] is None
    assert api.get("/v1/jobs?cursor=&limit=3").json() == page1, "an empty cursor: the first page"

    changed = api.put(f"/v1/jobs/{ids[0]}", json=job_body(9, cron="0 9 * * MON",
                                                          overlap="skip")).json()
    assert changed["revision"] == 2 and changed["overlap"] == "skip"
    assert api.get(f"/v1/jobs/{ids[0]}").json()["schedule"]["cron"] == "0 9 * * MON"
    preview = api.get(f"/v1/jobs/{ids[0]}/next", params={"count": 3}).json()["next"]
    assert len(preview) == 3
    assert all(datetime.fromisoformat(p.replace("Z", "+00:00")).weekday() == 0 for p in preview)
    assert api.delete(f"/v1/jobs/{ids[0]}").status_code == 204
    assert api.get(f"/v1/jobs/{ids[0]}").status_code == 404


def test_every_second_job_has_a_ledger_row_per_slot(stack, api, monkeypatch):
    """Every slot gets one decision, from the job's creation to its end, judged against the
    webhook receiver's log and the ledger topic's whole history (``tests.chaos.checker``).

    The fault is the one the reconciler exists for: the worker dies with a run in flight whose
    fired record its group had already committed past (the executor commits only resolved
    records, ``streams/execution/offsets.py``, but an operator's offset reset would not). Made
    exact here: the receiver holds one slot's call and freezes the worker (SIGSTOP) the moment
    it arrives; the worker is then SIGKILLed and its
    group's offset on the job's fired partition committed at the partition's end before it is
    started again. The restarted worker finds the slot in the fired topic's tail past its
    fired-through mark and leaves it to its record, which its executor will never read: only
    the reconciler, its lag after the record, re-drives it (the restarted worker's lag is
    ``RECONCILE_LAG_S``, not the default two minutes: the suite waits less, the mechanism is the
    same). Every other slot is run once (the
    ones missed while the worker was down caught up, ``fire_all``); the held slot twice, its
    first call in flight at the kill. The slot must have been fired after the worker's last
    mark (else the restarted worker would not look for it): a slot caught by a mark written
    between its fire and its call is let go and the next one held."""
    from stack import isolated, processes
    from streams.topology import FIRED, consumer_group, partition_for
    from tests.chaos.checker import history, ledger_history, slots_violations

    worker = processes.alive(stack.pidfile("worker-1"))
    assert worker, "worker-1 is not running"
    armed, frozen = threading.Event(), threading.Event()
    released = [threading.Event()]
    held: list[str] = []

    def behave(fid: str, n: int) -> tuple[int, float]:
        """Hold the first call of a slot once armed, freezing the worker as it arrives."""
        if armed.is_set() and n == 1:
            armed.clear()
            held.append(fid)
            os.kill(worker, signal.SIGSTOP)
            frozen.set()
            released[-1].wait(600)
        return 204, 0

    with Receiver(port := free_port(), behave=behave, quiet=True) as receiver:
        start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
        end = start + timedelta(seconds=30)
        job = api.post("/v1/jobs", json={
            "schedule": {"every_s": 1, "start": start.isoformat(), "end": end.isoformat()},
            "target": webhook(port),
            "misfire": {"policy": "fire_all", "max_lateness_s": 600}}).json()["id"]
        part = partition_for(job, cluster_partitions())
        wait_for(lambda: len(receiver.fires) >= 3, timeout_s=60)
        for _ in range(5):  # a slot fired past the worker's last mark, held in flight
            frozen.clear()
            armed.set()
            wait_for(frozen.is_set, timeout_s=30)
            mark = int(isolated.call("streams.scheduling.progress:load_marks", stack.s.bootstrap,
                                     timeout_s=60).get(str(part), 0))
            fired_ms = {codec().decode(value)["fire_id"]: at for at, value
                        in history(stack.s.bootstrap, FIRED.name, job)[job]}
            if fired_ms[held[-1]] >= mark:
                break
            os.kill(worker, signal.SIGCONT)  # a mark covers it already: let it go
            released[-1].set()
            released.append(threading.Event())
        else:
            raise AssertionError(f"every held slot was behind a mark already: {held}")
        killed_ms = sigkill(stack, "worker-1")
        released[-1].set()
        isolated.call("tests.integration.helpers:commit_at_end", stack.s.bootstrap,
                      consumer_group(FIRED), FIRED.name, part, timeout_s=120)
        slots = [int(start.timestamp() * 1000) + 1000 * i for i in range(31)]
        expected = {fire_id(job, s) for s in slots}

        def decided() -> set[str]:
            return {r["fire_id"] for r in ledger(stack, job_id=job)}

        lag_before = os.environ.get("CRONSTREAM_RECONCILER_LAG_S")
        monkeypatch.setenv("CRONSTREAM_RECONCILER_LAG_S", str(RECONCILE_LAG_S))
        try:
            stack.start_worker("worker-1")
            wait_for(lambda: decided() >= expected, timeout_s=RECONCILE_LAG_S + 120, every_s=2,
                     explain=lambda: f"undecided: {sorted(expected - decided())}")
            wait_for(executor_caught_up(stack, [job]))
            wait_for(sink_caught_up(stack, LEDGER))
        finally:  # the tests after this one share the worker: back to the lag it had
            if lag_before is None:
                monkeypatch.delenv("CRONSTREAM_RECONCILER_LAG_S")
            else:
                monkeypatch.setenv("CRONSTREAM_RECONCILER_LAG_S", lag_before)
            processes.stop(stack.pidfile("worker-1"), timeout_s=60)
            stack.start_worker("worker-1")
    first = {}
    for fid, at in zip(receiver.fires, receiver.arrived_ms, strict=True):
        first.setdefault(fid, at)
    # the held slot's first call was in flight at the kill: its re-drive calls it again
    problems = slots_violations(stack, expected, receiver.fires, key_prefix=f"{job}@",
                                may_repeat=lambda f: f == held[-1] and first[f] < killed_ms)
    assert problems == [], problems
    caught = ledger_history(stack.s.bootstrap, {held[-1]}, f"{job}@")[held[-1]]
    assert [r["reason"] for r in caught] == ["re-driven by the reconciler (1)"], caught


def test_pause_resume_and_trigger(stack, api):
    port = free_port()
    with Receiver(port, quiet=True) as receiver:
        job = api.post("/v1/jobs", json={"schedule": {"cron": "*/1 * * * * *"},
                                         "target": webhook(port)}).json()
        wait_for(lambda: len(receiver.fires) >= 2)
        assert api.post(f"/v1/jobs/{job['id']}/pause").json()["paused"] is True
        paused_rows = wait_for(lambda: [r for r in ledger(stack, job_id=job["id"])
                                        if r["decision"] == "skipped_paused"][:2])
        assert all(r["outcome"] == "not_run" and r["reason"] for r in paused_rows)
        arrived = len(receiver.fires)
        # the scheduler went on: two more slots decided (skipped) since
        paused = wait_for(lambda: (p := [r["nominal_time"] for r in ledger(stack, job_id=job["id"])
                                         if r["decision"] == "skipped_paused"])
                          and len(p) >= len(paused_rows) + 2 and p)
        assert len(receiver.fires) <= arrived + 1  # at most one slot already in flight
        assert [f for f in receiver.fires if fired_slot(f) >= min(paused)] == [], \
            "a slot at or after the first paused one ran"
        trig = api.post(f"/v1/jobs/{job['id']}/trigger")
        assert trig.status_code == 202
        wait_for(lambda: trig.json()["fire_id"] in receiver.fires)
        assert api.post(f"/v1/jobs/{job['id']}/resume").json()["paused"] is False
        count = len(receiver.fires)
        wait_for(lambda: len(receiver.fires) >= count + 2)
        api.delete(f"/v1/jobs/{job['id']}")
    rows = {r["fire_id"]: r for r in ledger(stack, job_id=job["id"])}
    assert rows[trig.json()["fire_id"]]["decision"] == "triggered"
    assert len(receiver.fires) == len(set(receiver.fires))


def test_backfill_runs_missing_slots_once_and_never_repeats_done_ones(stack, api):
    port = free_port()
    with Receiver(port, quiet=True) as receiver:
        start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
        job = api.post("/v1/jobs", json={
            "schedule": {"every_s": 1, "start": start.isoformat(),
                         "end": (start + timedelta(seconds=3)).isoformat()},
            "target": webhook(port)}).json()
        wait_for(lambda: len(ledger(stack, job_id=job["id"])) >= 4)
        ran = set(receiver.fires)
        early = start - timedelta(seconds=5)
        response = api.post(f"/v1/jobs/{job['id']}/backfill",
                            json={"from": early.isoformat(), "to": start.isoformat()})
        assert response.status_code == 202, response.text
        assert response.json()["slots"] == 1  # the schedule's first slot is `start`
        response = api.post(f"/v1/jobs/{job['id']}/backfill", json={
            "from": start.isoformat(), "to": (start + timedelta(seconds=3)).isoformat()})
        assert response.json()["slots"] == 4
        # behind the backfills: a trigger, applied after them (the same command partition) and
        # fired after theirs (the same fired partition); once it ran and the executor took up
        # everything up to it, any backfilled slot it ran has called
        trig = api.post(f"/v1/jobs/{job['id']}/trigger").json()["fire_id"]
        wait_for(lambda: trig in receiver.fires)
        wait_for(executor_caught_up(stack, [job["id"]]))
    assert set(receiver.fires) == ran | {trig}, "backfilled slots that already ran were run again"
    assert len(receiver.fires) == len(set(receiver.fires)), "a fire id ran more than once"


def test_backfilled_slots_older_than_max_lateness_still_run(stack, api):
    """A backfill asks for old slots on purpose: the executor runs them however old they are
    (their run is due within ``max_lateness_s`` of the asking, not of the slot), rather than
    expiring them as a run backlog's stale turns. By the time the last skipped row is there,
    the first slot is two seconds old, twice the job's ``max_lateness_s``."""
    port = free_port()
    with Receiver(port, quiet=True) as receiver:
        start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
        end = start + timedelta(seconds=2)
        job = api.post("/v1/jobs", json={
            "schedule": {"every_s": 1, "start": start.isoformat(), "end": end.isoformat()},
            "misfire": {"policy": "skip", "max_lateness_s": 1}, "target": webhook(port)}).json()
        assert api.post(f"/v1/jobs/{job['id']}/pause").json()["paused"] is True
        skipped = wait_for(lambda: [r for r in ledger(stack, job_id=job["id"])
                                    if r["decision"] == "skipped_paused"][2:] and
                           ledger(stack, job_id=job["id"]), timeout_s=60)
        assert receiver.fires == []
        api.post(f"/v1/jobs/{job['id']}/resume")  # the schedule has ended: nothing more fires
        response = api.post(f"/v1/jobs/{job['id']}/backfill",
                            json={"from": start.isoformat(), "to": end.isoformat()})
        assert response.status_code == 202 and response.json()["slots"] == len(skipped)
        rows = wait_for(lambda: (r := ledger(stack, job_id=job["id"])) and all(
            x["decision"] == "backfilled" and x["outcome"] != "pending" for x in r) and r,
            timeout_s=60)
    assert {r["outcome"] for r in rows} == {"succeeded"}, rows
    assert sorted(receiver.fires) == sorted(r["fire_id"] for r in rows)


def test_runs_endpoint_agrees_with_postgres(stack, api):
    port = free_port()
    with Receiver(port, quiet=True):
        # 5 s: the job owes slots from its creation, which a slow POST can push past a second
        # boundary after ``now`` was read (a CI run got 3 slots from a 4 s window)
        end = datetime.now(UTC) + timedelta(seconds=5)
        job = api.post("/v1/jobs", json={"schedule": {"cron": "*/1 * * * * *", "end": end.isoformat()},
                                         "target": webhook(port)}).json()
        rows = wait_for(lambda: (r := ledger(stack, job_id=job["id"])) and len(r) >= 4 and r)
    runs = api.get(f"/v1/jobs/{job['id']}/runs", params={"limit": 2}).json()
    assert api.get(f"/v1/jobs/{job['id']}/runs?cursor=&limit=2").json() == runs, "the first page"
    more = api.get(f"/v1/jobs/{job['id']}/runs", params={"cursor": runs["next_cursor"]}).json()
    listed = runs["items"] + more["items"]
    db = ledger(stack, job_id=job["id"])
    assert [r["fire_id"] for r in listed] == [r["fire_id"] for r in reversed(db)]
    for run, row in zip(listed, reversed(db), strict=True):
        assert run["decision"] == row["decision"] and run["outcome"] == row["outcome"]
        assert run["fire_id"] == fire_id(job["id"], int(row["nominal_time"].replace(tzinfo=UTC)
                                                        .timestamp() * 1000))
    assert len(rows) >= 4


def test_bad_input_names_the_field(stack, api):
    past = (datetime.now(UTC) - timedelta(days=2)).isoformat()
    cases = [
        ({"schedule": {"at": past}, "target": webhook(9)}, 422, "schedule"),
        ({"schedule": {"cron": "* * * * *", "dst": {"gap": "sideways"}}, "target": webhook(9)},
         422, "gap"),
        ({"schedule": {"cron": "* * * * *"}, "target": {"type": "kafka", "topic": "cronstream.jobs"}},
         422, "target"),
        ({"schedule": {"cron": "* * * * *"}, "target": webhook(9), "retry": {"max_attempts": 0}},
         422, "max_attempts"),
        ({"schedule": {"cron": "* * * * *"}, "target": webhook(9), "surprise": 1}, 422, "surprise"),
    ]
    for body, status, field in cases:
        response = api.post("/v1/jobs", json=body)
        assert response.status_code == status, (body, response.text)
        assert field in response.text, (field, response.text)
    huge = api.post("/v1/jobs", content=b'{"x":"' + b"a" * 600_000 + b'"}',
                    headers={"content-type": "application/json"})
    assert huge.status_code == 413 and "larger than" in huge.text
    for raw in (b'{"schedule": {"cron": "* * * * *"}, "target": ', b'{"name": "\xff\xfe"}'):
        broken = api.post("/v1/jobs", content=raw, headers={"content-type": "application/json"})
        assert 400 <= broken.status_code < 500 and "body" in broken.text, broken.text


def test_ssrf_guard_refuses_private_targets_unless_allowed(stack):
    with make_client(stack, allowed_targets=[]) as strict:
        for url in ("http://127.0.0.1:8080/x", "http://10.1.2.3/x", "http://169.254.169.254/x",
                    "http://[::1]/x", "http://localhost/x"):
            response = strict.post("/v1/jobs", json={"schedule": {"cron": "* * * * *"},
                                                     "target": {"type": "webhook", "url": url}})
            assert response.status_code == 422, (url, response.text)
            assert "target" in response.text and "url" in response.text


def test_a_job_due_now_or_just_past_fires(stack, api):
    # regression: a job whose only slot was at (or just before) its creation was skipped
    # silently when the partition's fired-through mark had already passed that instant
    port = free_port()
    with Receiver(port, quiet=True) as receiver:
        ids = []
        for offset_s in (0, -2, -30):
            at = (datetime.now(UTC) + timedelta(seconds=offset_s)).isoformat()
            ids.append(api.post("/v1/jobs", json={"schedule": {"at": at},
                                                  "target": webhook(port)}).json()["id"])
        rows = wait_for(lambda: (r := [x for j in ids for x in ledger(stack, job_id=j)])
                        and len(r) == 3 and r, timeout_s=60)
    assert sorted(r["decision"] for r in rows) == ["fired", "fired", "missed_caught_up"]
    assert len(receiver.fires) == 3


def test_a_job_changed_or_deleted_just_before_its_slot_fires_as_it_is_then(stack, api):
    # the scheduler prepares slots up to PREPARE_AHEAD_MS before they are due (job read,
    # decoded, done table checked); a pause or delete after that must still win
    from streams.scheduling.deciding import PREPARE_AHEAD_MS

    port = free_port()
    at = datetime.now(UTC) + timedelta(milliseconds=PREPARE_AHEAD_MS - 1_000)
    with Receiver(port, quiet=True) as receiver:
        before = prepared(stack)
        ids = [api.post("/v1/jobs", json={"schedule": {"at": at.isoformat()},
                                          "target": webhook(port)}).json()["id"]
               for _ in range(3)]
        kept, paused, deleted = ids
        # indexed and prepared (the workers' gauge of slots prepared ahead counts the three)
        wait_for(lambda: prepared(stack) >= before + 3,
                 timeout_s=20, every_s=0.1)
        assert datetime.now(UTC) < at - timedelta(seconds=1), "too slow to test the window"
        assert api.post(f"/v1/jobs/{paused}/pause").json()["paused"] is True
        assert api.delete(f"/v1/jobs/{deleted}").status_code == 204
        rows = wait_for(lambda: (r := {j: ledger(stack, job_id=j) for j in (kept, paused)})
                        and all(r.values()) and r, timeout_s=60)
        # the slot was decided for all three by now; any run of theirs has called and its
        # outcome reached Postgres once the executor and then the ledger's sink caught up
        wait_for(executor_caught_up(stack, ids))
        wait_for(sink_caught_up(stack, LEDGER))
    assert [r["decision"] for r in rows[kept]] == ["fired"]
    assert [r["decision"] for r in rows[paused]] == ["skipped_paused"]
    assert receiver.fires == [rows[kept][0]["fire_id"]]
    assert ledger(stack, job_id=deleted) == []


def test_a_restarted_api_reads_only_the_tail_of_the_jobs_topic(stack, api):
    """The API keeps its view of the jobs in a SQLite file with a checkpoint: a restart resumes
    from it (at 1.1M jobs a whole re-read took 74 s), and still sees what was written while it
    was down, a change, a tombstone and another writer's job, in the tenant's listing."""
    from stack import processes
    from streams.runtime.codec import codec
    from streams.runtime.emit import Emitter
    from streams.topology import JOBS

    kept, changed, deleted = (api.post("/v1/jobs", json=job_body(9)).json()["id"]
                              for _ in range(3))
    record = {"tenant": api.tenant, "revision": 1,
              "schedule": {"cron": "0 0 1 1 *", "timezone": "UTC"},
              "target": {"type": "kafka", "topic": f"{api.tenant}.t", "value": "v"},
              "created_ms": 1, "updated_ms": 1}
    log = stack.log("api")
    processes.stop(stack.pidfile("api"))
    written_while_down = f"{api.tenant}-other-writer"
    emitter = Emitter(stack.s.bootstrap, "test-jobs-tail")
    emitter.produce(JOBS, written_while_down,
                    codec().encode("Job", {**record, "job_id": written_while_down}))
    emitter.produce(JOBS, changed, codec().encode("Job", {**record, "job_id": changed,
                                                          "revision": 7, "paused": True}))
    emitter.produce(JOBS, deleted, None)
    emitter.flush(30)
    emitter.close()
    log_size = log.stat().st_size
    stack.start_api()

    started = log.read_text()[log_size:]
    assert "view cronstream.jobs caught up in" in started and "(resumed from {" in started, started
    listed = {j["id"]: j for j in api.get("/v1/jobs", params={"limit": 500}).json()["items"]}
    assert set(listed) == {kept, changed, written_while_down}
    assert listed[changed]["paused"] is True
    assert api.get(f"/v1/jobs/{deleted}").status_code == 404
