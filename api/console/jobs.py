"""The jobs pages: a searchable, paged list; a job's page with the schedule in effect, its
next slots, a timeline of its recent slots (one page of the ledger per view) and its dead
letters; the buttons pause, resume, trigger, backfill (previewed), edit and delete (confirmed).

Every read and write goes through the API's route functions with the session's tenant, so a
job id of another tenant is "not found" here exactly as it is on ``/v1/jobs/{id}``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from pydantic import ValidationError

from api import sink
from api.console import paging
from api.console.web import SignedIn, back, posted, problem_text, render, signed_in, tenant_of
from api.models import Backfill, JobCreate, JobIn, iso, job_view, public_job_id
from api.routes import jobs as api_jobs
from api.state import api_state
from streams.runtime import clock
from streams.scheduling import schedule

router = APIRouter()
# The text search (a substring of id, name or a label: no index finds those) reads at most this
# many of the tenant's jobs per page: a rare match answers in a few short pages (a next page
# link, fewer rows) instead of one request that reads them all.
TEXT_SCAN = 5000
Who = Annotated[SignedIn, Depends(signed_in)]


def _last_runs(dsn: str, tenant: str, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The newest ledger row of each job on a list page: one query for the page's ids."""
    if not job_ids:
        return {}
    query = ("SELECT DISTINCT ON (job_id) job_id, decision, outcome, nominal_time FROM ledger "
             "WHERE kind = 'job' AND tenant = %s AND job_id = ANY(%s) "
             # a reminder's slot is a row per channel: the one that says most (sent first)
             "ORDER BY job_id, nominal_time DESC, outcome = 'succeeded' DESC, "
             "outcome = 'not_run'")
    return {r[0]: {"decision": r[1], "outcome": r[2], "at": r[3]}
            for r in sink.rows(dsn, query, (tenant, job_ids))}


async def _search(request: Request, tenant: dict[str, Any], q: str, state: str | None,
                  cursor: str | None) -> tuple[list[dict[str, Any]], str | None, dict[str, int]]:
    """One page of the tenant's jobs in ``state`` (None: all), and its counts per state: all
    of them (soonest next run first within a state), a label filter, or a text search over id,
    name and labels (``TEXT_SCAN`` jobs a page at most)."""
    if not q or paging.is_label_filter(q):
        page = await api_jobs.list_jobs(request, tenant, cursor, paging.PAGE, [q] if q else None,
                                        state, None)
        return page["items"], page["next_cursor"], page["counts"]
    found: list[dict[str, Any]] = []
    scanned, after = 0, cursor
    while scanned < TEXT_SCAN:
        page = await api_jobs.list_jobs(request, tenant, after, 500, None, None, None)
        for view in page["items"]:
            scanned += 1
            if paging.matches(view, q) and state in (None, view["state"]):
                found.append(view)
                if len(found) == paging.PAGE:
                    return found, view["id"], page["counts"]
        if page["next_cursor"] is None:
            return found, None, page["counts"]
        after = page["next_cursor"]
    return found, after, page["counts"]


def _next_slots(records: list[dict[str, Any] | None], now: int) -> dict[str, list[int]]:
    """Each listed job's next slot (CPU-bound: through ``api.work``, off the loop)."""
    return {r["job_id"]: schedule.slots_between(r["schedule"], r["job_id"], now, None, 1)
            for r in records if r is not None}


# the list's tabs: a user opens on the jobs that run, not on the one-offs that did
TABS = ("active", "paused", "completed", "all")


@router.get("/jobs")
async def jobs_page(request: Request, who: Who, q: str = "", cursor: str | None = None,
                    state: str = "active") -> Response:
    tenant = tenant_of(who)
    api, now = api_state(request), clock.now_ms()
    tab = state if state in TABS else "active"
    try:
        items, next_cursor, counts = await _search(request, tenant, q.strip(),
                                                   None if tab == "all" else tab, cursor or None)
    except HTTPException as exc:
        return render(request, "jobs.html", who, status=exc.status_code, rows=[], q=q,
                      next_cursor=None, error=problem_text(exc), tab=tab, tabs=[])
    records = {view["id"]: api_jobs.find_job(api, tenant["tenant"], view["id"]) for view in items}
    stored = [r["job_id"] for r in records.values() if r is not None]
    last = await run_in_threadpool(_last_runs, api.conf.pg_dsn, tenant["tenant"], stored)
    upcoming = await api.work.run(tenant["tenant"], _next_slots, list(records.values()), now)
    rows = []
    for view in items:
        record = records[view["id"]]
        nxt = upcoming.get(record["job_id"], []) \
            if record is not None and view["state"] != "completed" else []
        run = last.get(record["job_id"]) if record is not None else None
        rows.append({"view": view, "words": paging.schedule_words(view, record and record["job_id"]),
                     "next": iso(nxt[0]) if nxt else None, "last": run,
                     "last_class": paging.slot_class(run["decision"], run["outcome"]) if run else ""})
    counted = {**counts, "all": sum(counts.values())}
    tabs = [(name, counted[name]) for name in TABS]
    return render(request, "jobs.html", who, rows=rows, q=q, next_cursor=next_cursor, tab=tab,
                  tabs=tabs)


@router.post("/jobs")
async def create_job(request: Request, who: Who) -> Response:
    """A webhook job from the list page's form (the API takes any target; the console's form
    is the common case: a cron, a zone, a URL)."""
    tenant = tenant_of(who)
    form = await posted(request, who)
    body: dict[str, Any] = {"schedule": {"cron": form.get("cron", ""),
                                         "timezone": form.get("timezone") or "UTC"},
                            "target": {"type": "webhook", "url": form.get("url", "")}}
    for name in ("id", "name"):
        if form.get(name):
            body[name] = form[name]
    try:
        job = await api_jobs.create_job(JobCreate.model_validate(body), request, Response(),
                                        tenant, None)
    except ValidationError as exc:
        return back(request, "/jobs", "not created: " + "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()))
    except HTTPException as exc:
        return back(request, "/jobs", "not created: " + problem_text(exc))
    return back(request, f"/jobs/{job['id']}", "job created")


def _not_found(request: Request, who: SignedIn, job_id: str) -> Response:
    return render(request, "error.html", who, status=404, error=f"job {job_id} not found")


@router.get("/jobs/{job_id}")
async def job_page(request: Request, job_id: str, who: Who, cursor: int | None = None,
                   only: str = "") -> Response:
    tenant = tenant_of(who)
    api, now = api_state(request), clock.now_ms()
    record = api_jobs.find_job(api, tenant["tenant"], job_id)
    if record is None:
        return _not_found(request, who, job_id)
    view = job_view(record, now)
    slots = await api.work.run(tenant["tenant"], schedule.slots_between, record["schedule"],
                               record["job_id"], now, None, paging.NEXT_SLOTS)
    filter_ = "not_run" if only == "not_run" else None
    history = await api_jobs.job_runs(job_id, request, tenant, cursor, paging.HISTORY_PAGE,
                                      filter_)
    dead = await api_jobs.job_runs(job_id, request, tenant, None, 20, "failed")
    for run in history["items"]:
        run["class"] = paging.slot_class(run["decision"], run["outcome"])
    return render(request, "job.html", who, job=view, record=record,
                  words=paging.schedule_words(view, record["job_id"]),
                  next_slots=paging.with_dst_marks(slots, record["schedule"]["timezone"]),
                  runs=history["items"], next_cursor=history["next_cursor"], only=only,
                  dead=dead["items"])


async def _act(request: Request, who: SignedIn, job_id: str, action: str) -> Response:
    tenant = tenant_of(who)
    await posted(request, who)
    handler = {"pause": api_jobs.pause_job, "resume": api_jobs.resume_job,
               "trigger": api_jobs.trigger_job}[action]
    try:
        result = await handler(job_id, request, tenant)
    except HTTPException as exc:
        if exc.status_code == 404:
            return _not_found(request, who, job_id)
        return back(request, f"/jobs/{job_id}", f"{action} refused: {problem_text(exc)}")
    said = {"pause": "paused: its slots are recorded skipped_paused until resumed",
            "resume": "resumed from its next slot",
            "trigger": f"triggered: fire id {result.get('fire_id')}"}[action]
    return back(request, f"/jobs/{job_id}", said)


@router.post("/jobs/{job_id}/pause")
async def pause(request: Request, job_id: str, who: Who) -> Response:
    return await _act(request, who, job_id, "pause")


@router.post("/jobs/{job_id}/resume")
async def resume(request: Request, job_id: str, who: Who) -> Response:
    return await _act(request, who, job_id, "resume")


@router.post("/jobs/{job_id}/trigger")
async def trigger(request: Request, job_id: str, who: Who) -> Response:
    return await _act(request, who, job_id, "trigger")


def _range(start: str, end: str) -> Backfill:
    """The backfill form's range: ``datetime-local`` inputs read as UTC."""
    def aware(text: str) -> str:
        return text if text.endswith("Z") or "+" in text[10:] else text + "Z"
    return Backfill.model_validate({"from": aware(start), "to": aware(end)})


@router.get("/jobs/{job_id}/backfill")
async def backfill_preview(request: Request, job_id: str, who: Who, start: str = "",
                           end: str = "") -> Response:
    """The slots a backfill of the range would drive, before it is asked for."""
    tenant = tenant_of(who)
    record = api_jobs.find_job(api_state(request), tenant["tenant"], job_id)
    if record is None:
        return _not_found(request, who, job_id)
    try:
        span = _range(start, end)
    except ValidationError as exc:
        return back(request, f"/jobs/{job_id}", "backfill: " + "; ".join(e["msg"] for e in exc.errors()))
    lo, hi = int(span.from_.timestamp() * 1000), int(span.to.timestamp() * 1000)
    slots = await api_state(request).work.run(
        tenant["tenant"], schedule.slots_between, record["schedule"], record["job_id"], lo - 1,
        hi, schedule.BACKFILL_LIMIT + 1)
    return render(request, "backfill.html", who, job_id=public_job_id(record), start=start,
                  end=end, slots=[iso(s) for s in slots[:100]], total=len(slots),
                  too_many=len(slots) > schedule.BACKFILL_LIMIT, limit=schedule.BACKFILL_LIMIT)


@router.post("/jobs/{job_id}/backfill")
async def backfill(request: Request, job_id: str, who: Who) -> Response:
    tenant = tenant_of(who)
    form = await posted(request, who)
    try:
        result = await api_jobs.backfill_job(job_id, _range(form.get("start", ""),
                                                            form.get("end", "")), request, tenant)
    except ValidationError as exc:
        return back(request, f"/jobs/{job_id}", "backfill: " + "; ".join(e["msg"] for e in exc.errors()))
    except HTTPException as exc:
        return back(request, f"/jobs/{job_id}", f"backfill refused: {problem_text(exc)}")
    return back(request, f"/jobs/{job_id}", f"backfill asked for: {result['slots']} slots")


# what the edit form shows: the public view's fields a PUT accepts (api.models.JobIn)
EDITABLE = ("schedule", "target", "misfire", "overlap", "retry", "jitter_s", "paused", "name",
            "description", "labels", "delete_after_completion")


@router.get("/jobs/{job_id}/edit")
async def edit_page(request: Request, job_id: str, who: Who) -> Response:
    """The job's definition as the API's JSON, to change and save (``PUT /v1/jobs/{id}``):
    every field the API takes, without a form to keep in step with the schema."""
    tenant = tenant_of(who)
    record = api_jobs.find_job(api_state(request), tenant["tenant"], job_id)
    if record is None:
        return _not_found(request, who, job_id)
    view = job_view(record, clock.now_ms())
    body = json.dumps({k: view[k] for k in EDITABLE}, indent=2)
    return render(request, "edit.html", who, job=view, body=body, error=None)


@router.post("/jobs/{job_id}/edit")
async def edit(request: Request, job_id: str, who: Who) -> Response:
    tenant = tenant_of(who)
    form = await posted(request, who)
    text = form.get("body", "")
    try:
        body = JobIn.model_validate(json.loads(text))
        await api_jobs.replace_job(job_id, body, request, tenant)
    except json.JSONDecodeError as exc:
        error = f"not JSON: {exc}"
    except ValidationError as exc:
        error = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                          for e in exc.errors())
    except HTTPException as exc:
        if exc.status_code == 404:
            return _not_found(request, who, job_id)
        error = problem_text(exc)
    else:
        return back(request, f"/jobs/{job_id}", "saved: the change takes effect from the next slot")
    record = api_jobs.find_job(api_state(request), tenant["tenant"], job_id)
    if record is None:
        return _not_found(request, who, job_id)
    return render(request, "edit.html", who, status=422, job=job_view(record, clock.now_ms()),
                  body=text, error=error)


@router.get("/jobs/{job_id}/delete")
async def delete_confirm(request: Request, job_id: str, who: Who) -> Response:
    tenant = tenant_of(who)
    record = api_jobs.find_job(api_state(request), tenant["tenant"], job_id)
    if record is None:
        return _not_found(request, who, job_id)
    return render(request, "delete.html", who, job=job_view(record, clock.now_ms()))


@router.post("/jobs/{job_id}/delete")
async def delete(request: Request, job_id: str, who: Who) -> Response:
    tenant = tenant_of(who)
    await posted(request, who)
    try:
        await api_jobs.delete_job(job_id, request, tenant)
    except HTTPException:
        return _not_found(request, who, job_id)
    return back(request, "/jobs", f"job {job_id} deleted (its history stays in the ledger)")

