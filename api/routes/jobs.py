"""``/v1/jobs``: create, read, change and delete jobs; pause, resume, trigger, backfill; preview
the next slots; read run history. Writes go to the jobs and job-commands topics; reads come from
the API's view of the jobs topic and from the ledger's sink in Postgres."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from api import sink
from api.auth import current_tenant
from api.errors import problem
from api.job_store import READ_REFRESH_MOST, decode_cursor, encode_cursor
from api.models import (
    LABEL_KEY,
    Backfill,
    EmptyIsAbsent,
    JobCreate,
    JobIn,
    iso,
    job_record,
    job_view,
    ms,
    public_job_id,
    stored_job_id,
    utc_ms,
)
from api.state import ApiState, api_state
from streams.adapters import tenants
from streams.execution import reminders, ssrf, targets
from streams.runtime import clock
from streams.runtime.codec import codec
from streams.scheduling import schedule
from streams.topology import JOB_COMMANDS, JOBS

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
Tenant = Annotated[dict[str, Any], Depends(current_tenant)]
IDEMPOTENCY_NAMESPACE = uuid.UUID("6f1c9b52-5f0e-4f7a-9a53-3c0f7f1f6c11")
PREVIEW_SLOTS = 5
MAX_LABEL_FILTERS = 10
MAX_NAME_PREFIX = 200



def find_job(api: ApiState, tenant: str, job_id: str) -> dict[str, Any] | None:
    """The tenant's job that ``job_id`` names: its client-chosen id (stored as
    ``<tenant>/<id>``) or a generated one. Another tenant's job is never found."""
    for key in (stored_job_id(tenant, job_id), job_id):
        job = api.jobs.get(key)
        if job is not None and job["tenant"] == tenant:
            return job
    return None


def _own_job(request: Request, tenant: dict[str, Any], job_id: str) -> dict[str, Any]:
    job = find_job(api_state(request), tenant["tenant"], job_id)
    if job is None:
        raise problem(404, "", f"job {job_id} not found")
    return job


def check_job(record: dict[str, Any], tenant: dict[str, Any], now: int) -> None:
    """Everything about a job that a JSON schema cannot say, as 422s naming the field."""
    sched = record["schedule"]
    try:
        schedule.validate(sched, record["job_id"])
    except schedule.ScheduleError as exc:
        raise problem(422, exc.field, exc.message) from exc
    lateness_ms = record["max_lateness_s"] * 1000
    if sched["at_ms"] is not None and sched["at_ms"] < now - lateness_ms:
        raise problem(422, "schedule.at", "is further in the past than misfire.max_lateness_s")
    # no horizon: a leap-day job waits up to 8 years, ``0 0 * 2 1#5`` (Feb 29 on a Monday) 40;
    # the engine knows how far a slot can be (``cron.SEARCH_DAYS``) and says None past it
    slots = schedule.slots_between(sched, record["job_id"], now - 1, None, PREVIEW_SLOTS)
    if not slots and sched["at_ms"] is None:
        raise problem(422, "schedule", "has no slot after now")
    gaps = [b - a for a, b in zip(slots, slots[1:], strict=False)]
    if gaps and min(gaps) < tenant["min_interval_s"] * 1000:
        raise problem(422, "schedule", f"fires every {min(gaps) / 1000:g}s; this tenant's "
                      f"minimum interval is {tenant['min_interval_s']}s")
    target = record["target"]
    if target["type"] == "webhook":  # its addresses are vetted by ``vet_webhooks``, awaited
        try:
            ssrf.url_host(target["url"])
        except ssrf.TargetRefused as exc:
            raise problem(422, "target.url", str(exc)) from exc
    elif target["type"] == "kafka" and not targets.tenant_topic_allowed(tenant["tenant"],
                                                                        target["topic"] or ""):
        if (target["topic"] or "").startswith(targets.SYSTEM_TOPIC_PREFIXES):
            raise problem(422, "target.topic", "is one of cronstream's own topics")
        raise problem(422, "target.topic", f"must start with '{tenant['tenant']}.'")
    elif (refused := _identity_refused(target, tenant)) is not None:
        raise problem(422, f"target.{refused[0]}", refused[1], "not_granted")


def _identity_refused(target: dict[str, Any], tenant: dict[str, Any]) -> tuple[str, str] | None:
    """(field, why) when a reminder's identity is not one the operator granted the tenant: an
    email's sender (``tenants.mail_refused``), a text's origination (``tenants.sms_refused``),
    each channel's of a reminder on both (the field ``channels.<i>.<field>``)."""
    if target["type"] == "email":
        return tenants.mail_refused(tenant, target["email_from"] or "")
    if target["type"] == "sms":
        return tenants.sms_refused(tenant, target["sms_origination"])
    if target["type"] == reminders.REMINDER:
        for i, channel in enumerate(reminders.channels_of(target)):
            refused = _identity_refused({**target, "type": channel}, tenant)
            if refused is not None:
                return f"channels.{i}.{refused[0]}", refused[1]
    return None


VET_AT_ONCE = 50  # host names resolved at the same time for one request (an import's)


async def vet_webhooks(api: ApiState, tenant: dict[str, Any],
                       records: list[tuple[list[str | int], dict[str, Any]]]) -> None:
    """Every webhook URL's host resolved (each once, concurrently, over asyncio within the
    settings' timeout: ``streams.adapters.dns``) and its addresses checked against the tenant's
    allow-list; a 422 at ``loc`` (the body's path to the record) for the first refused.
    Never ``getaddrinfo`` on the event loop: a name server that never answers held every other
    request of the API for its timeout, on each create (issue 40)."""
    refusals = await webhook_refusals(api, tenant, records)
    if refusals:
        loc, refused = refusals[0]
        raise HTTPException(422, detail=[{"loc": ["body", *loc, "target", "url"],
                                          "msg": refused, "type": "value_error"}])


async def webhook_refusals(api: ApiState, tenant: dict[str, Any],
                           records: list[tuple[list[str | int], dict[str, Any]]]
                           ) -> list[tuple[list[str | int], str]]:
    """``vet_webhooks``' checks, every refusal returned: (``loc`` of the first record with the
    URL, why), in the records' order."""
    urls: dict[str, list[str | int]] = {}
    for loc, record in records:
        if record["target"]["type"] == "webhook":
            urls.setdefault(record["target"]["url"], loc)
    gate = asyncio.Semaphore(VET_AT_ONCE)

    async def one(url: str) -> ssrf.TargetRefused | None:
        async with gate:
            try:
                await ssrf.vet(url, tenant["allowed_targets"], api.resolver.resolve)
            except ssrf.TargetRefused as exc:
                return exc
        return None

    answers = await asyncio.gather(*(one(url) for url in urls))
    return [(loc, str(refused)) for loc, refused in zip(urls.values(), answers, strict=True)
            if refused is not None]


async def _write(request: Request, record: dict[str, Any] | None, job_id: str) -> None:
    api = api_state(request)
    value = codec().encode("Job", record) if record is not None else None
    await api.emitter.send(JOBS, job_id, value)
    # on the thread pool: the store's lock may be held by an import's batch (a few hundred ms
    # at a million jobs), and on the event loop that wait held every other request too
    await run_in_threadpool(api.jobs.put, job_id, record)


# Fields added to the job after its first version: left at their defaults they stay out of the
# hash, so a body hashed before they existed hashes the same (an Idempotency-Key retried across
# the upgrade is still a replay, not a 409).
LATER_FIELDS = {"id": None, "name": None, "description": None, "labels": {},
                "delete_after_completion": False}


def _body_hash(body: JobIn) -> str:
    unset = {name for name, default in LATER_FIELDS.items()
             if getattr(body, name, default) == default}
    return hashlib.sha256(body.model_dump_json(exclude=unset).encode()).hexdigest()


@router.post("", status_code=201, summary="Create a job (honours Idempotency-Key)")
async def create_job(body: JobCreate, request: Request, response: Response, tenant: Tenant,
                     idempotency_key: Annotated[str | None, Header(max_length=200)] = None
                     ) -> dict[str, Any]:
    api = api_state(request)
    digest = _body_hash(body)
    if body.id is not None:
        # the id is the idempotency: a retried create (same body) answers with the job, any
        # other body finds the id taken. Looked up as the tenant's own (a generated id it
        # holds counts too, so a path never names two of its jobs): never another tenant's.
        job_id = stored_job_id(tenant["tenant"], body.id)
        existing = find_job(api, tenant["tenant"], body.id)
        if existing is not None:
            if existing["request_hash"] != digest:
                raise problem(409, "id", f"job id {body.id} is taken", "id_conflict")
            response.status_code = 200
            response.headers["Idempotent-Replayed"] = "true"
            return job_view(existing, clock.now_ms())
    elif idempotency_key:
        job_id = str(uuid.uuid5(IDEMPOTENCY_NAMESPACE, f"{tenant['tenant']}:{idempotency_key}"))
        existing = api.jobs.get(job_id)
        if existing is not None:
            if existing["request_hash"] != digest:
                raise problem(409, "", "Idempotency-Key was already used with a different body",
                              "idempotency_conflict")
            response.status_code = 200
            response.headers["Idempotent-Replayed"] = "true"
            return job_view(existing, clock.now_ms())
    else:
        job_id = str(uuid.uuid4())
    name = tenant["tenant"]
    with api.quotas.reserve(name, "jobs", 1, tenant["max_jobs"], lambda: api.job_count(name)):
        now = clock.now_ms()
        record = job_record(body, job_id=job_id, tenant=name, revision=1,
                            created_ms=now, updated_ms=now, request_hash=digest)
        await api.work.run(name, check_job, record, tenant, now)
        await vet_webhooks(api, tenant, [([], record)])
        await _write(request, record, job_id)
    response.headers["Location"] = f"/v1/jobs/{public_job_id(record)}"
    return job_view(record, now)


def _label_filters(labels: list[str]) -> list[tuple[str, str | None]]:
    """``key:value`` (that value) or ``key`` (any value) filters, as a 422 naming ``label``."""
    return [label_filter(text, ["query", "label"]) for text in labels]


def label_filter(text: str, loc: list[str]) -> tuple[str, str | None]:
    """``key:value`` (that value) or ``key`` (any value), or a 422 at ``loc``."""
    key, sep, value = text.partition(":")
    if not LABEL_KEY.match(key):
        raise HTTPException(422, detail=[{
            "loc": loc, "type": "value_error",
            "msg": f"{text[:80]!r}: expected key:value or key, the key 1-63 characters of "
                   "[A-Za-z0-9._/-]"}])
    return key, value if sep else None


State = Literal["active", "paused", "completed"]


def _bad_cursor() -> HTTPException:
    return HTTPException(422, detail=[{"loc": ["query", "cursor"], "type": "value_error",
                                       "msg": "not a next_cursor of this list's filters"}])


@router.get("", summary="List jobs: by state (soonest next run first), name prefix or labels, "
                        "with counts per state")
async def list_jobs(request: Request, tenant: Tenant,
                    cursor: Annotated[str | None, EmptyIsAbsent,
                                      Query(description="from next_cursor")] = None,
                    limit: Annotated[int, Query(ge=1, le=500)] = 100,
                    label: Annotated[list[str] | None, Query(
                        max_length=MAX_LABEL_FILTERS,
                        description="key:value or key; repeated, a job must match all")] = None,
                    state: Annotated[State | None, EmptyIsAbsent, Query(
                        description="active or paused: soonest next run first; completed: by "
                                    "id")] = None,
                    name: Annotated[str | None, EmptyIsAbsent, Query(
                        description=f"names starting with this (≤ {MAX_NAME_PREFIX} "
                                    "characters), in name order")] = None,
                    ) -> dict[str, Any]:
    """One page of the tenant's jobs and ``counts``, its jobs in each state. Without a filter
    in id order; ``label`` in id order, ``state`` in next-run order, ``name`` in name order,
    each combining with those after it (each a range of the store's indexes at any number of
    jobs: ``api.job_store``)."""
    api, owner = api_state(request), tenant["tenant"]
    if name is not None and len(name) > MAX_NAME_PREFIX:
        # checked here, not by Query(max_length): that runs after EmptyIsAbsent turned an
        # empty ``name=`` into None, and failed on it with a 500 (found by tests/security/test_fuzz)
        raise HTTPException(422, detail=[{"loc": ["query", "name"], "type": "value_error",
                                           "msg": f"at most {MAX_NAME_PREFIX} characters"}])
    if label or state or name:
        filters = _label_filters(label) if label else []
        page = await api.work.run(owner, _indexed, api, owner, filters, state, name, cursor,
                                  limit)
    else:
        now = clock.now_ms()
        ids = api.job_ids(owner, cursor, limit)
        page = {"items": [job_view(job, now) for i in ids if (job := api.jobs.get(i)) is not None],
                "next_cursor": ids[-1] if len(ids) == limit else None}
    return {**page, "counts": api.jobs.state_counts(owner)}


def _indexed(api: ApiState, tenant: str, labels: list[tuple[str, str | None]],
             state: str | None, name: str | None, cursor: str | None, limit: int
             ) -> dict[str, Any]:
    """One page by labels, state or name prefix, from the store's indexes, the facets first
    brought to now (up to ``READ_REFRESH_MOST`` of them: the refresher thread works off a top
    of the hour's backlog) (blocking: run through ``api.work``)."""
    now = clock.now_ms()
    api.jobs.refresh(now, READ_REFRESH_MOST)
    try:
        if labels:
            after_key = decode_cursor(cursor, (str,))[0] if cursor else None
            keys, following = api.jobs.by_labels(tenant, labels, state, name, after_key, limit)
            next_cursor = encode_cursor(following) if following is not None else None
        elif name is not None:
            after_name = decode_cursor(cursor, (str, str)) if cursor else None
            named, after = api.jobs.by_name(tenant, name, state, after_name, limit)
            keys = [key for key, _ in named]
            next_cursor = encode_cursor(*after) if after is not None else None
        else:
            assert state is not None
            after_next = decode_cursor(cursor, (int, str)) if cursor else None
            rows = api.jobs.by_next_run(tenant, state, after_next, limit)
            keys = [key for key, _ in rows]
            next_cursor = encode_cursor(rows[-1][1], rows[-1][0]) if len(rows) == limit else None
    except ValueError as exc:
        raise _bad_cursor() from exc
    items = [job_view(job, now) for key in keys if (job := api.jobs.get(key)) is not None]
    return {"items": items, "next_cursor": next_cursor}


@router.get("/{job_id}")
async def get_job(job_id: str, request: Request, tenant: Tenant) -> dict[str, Any]:
    return job_view(_own_job(request, tenant, job_id), clock.now_ms())


@router.put("/{job_id}", summary="Replace a job's definition; takes effect at its next slot")
async def replace_job(job_id: str, body: JobIn, request: Request, tenant: Tenant
                      ) -> dict[str, Any]:
    old = _own_job(request, tenant, job_id)
    now = clock.now_ms()
    record = job_record(body, job_id=old["job_id"], tenant=tenant["tenant"],
                        revision=old["revision"] + 1, created_ms=old["created_ms"],
                        updated_ms=now, request_hash=old["request_hash"])
    api = api_state(request)
    await api.work.run(tenant["tenant"], check_job, record, tenant, now)
    await vet_webhooks(api, tenant, [([], record)])
    await _write(request, record, old["job_id"])
    return job_view(record, now)


@router.delete("/{job_id}", status_code=204)
async def delete_job(job_id: str, request: Request, tenant: Tenant) -> Response:
    job = _own_job(request, tenant, job_id)
    await _write(request, None, job["job_id"])
    return Response(status_code=204)


async def _set_paused(job_id: str, request: Request, tenant: dict[str, Any],
                      paused: bool) -> dict[str, Any]:
    old = _own_job(request, tenant, job_id)
    now = clock.now_ms()
    if old["paused"] == paused:
        return job_view(old, now)
    record = {**old, "paused": paused, "revision": old["revision"] + 1, "updated_ms": now}
    await _write(request, record, old["job_id"])
    return job_view(record, now)


@router.post("/{job_id}/pause", summary="Pause: slots are recorded as skipped_paused")
async def pause_job(job_id: str, request: Request, tenant: Tenant) -> dict[str, Any]:
    return await _set_paused(job_id, request, tenant, True)


@router.post("/{job_id}/resume", summary="Resume from the next slot")
async def resume_job(job_id: str, request: Request, tenant: Tenant) -> dict[str, Any]:
    return await _set_paused(job_id, request, tenant, False)


async def _command(request: Request, job: dict[str, Any], command: str,
                   from_ms: int | None = None, to_ms: int | None = None) -> dict[str, Any]:
    cmd = {"command": command, "job_id": job["job_id"], "tenant": job["tenant"],
           "request_id": str(uuid.uuid4()), "requested_ms": clock.now_ms(),
           "from_ms": from_ms, "to_ms": to_ms}
    await api_state(request).emitter.send(JOB_COMMANDS, job["job_id"],
                                     codec().encode("JobCommand", cmd))
    return cmd


@router.post("/{job_id}/trigger", status_code=202, summary="Run the job once, now")
async def trigger_job(job_id: str, request: Request, tenant: Tenant) -> dict[str, Any]:
    job = _own_job(request, tenant, job_id)
    cmd = await _command(request, job, "trigger")
    return {"fire_id": schedule.fire_id(job["job_id"], cmd["requested_ms"]),
            "request_id": cmd["request_id"]}


@router.post("/{job_id}/backfill", status_code=202,
             summary="Run the slots in [from, to] that have not run (same fire ids: no doubles)")
async def backfill_job(job_id: str, body: Backfill, request: Request, tenant: Tenant
                       ) -> dict[str, Any]:
    job = _own_job(request, tenant, job_id)
    start, end = ms(body.from_), ms(body.to)
    assert start is not None and end is not None
    slots = await api_state(request).work.run(
        tenant["tenant"], schedule.slots_between, job["schedule"], job["job_id"], start - 1, end,
        schedule.BACKFILL_LIMIT + 1)
    if len(slots) > schedule.BACKFILL_LIMIT:
        raise problem(422, "to", f"the range holds more than {schedule.BACKFILL_LIMIT} slots")
    cmd = await _command(request, job, "backfill", start, end)
    return {"request_id": cmd["request_id"], "slots": len(slots),
            "fire_ids": [schedule.fire_id(job["job_id"], s) for s in slots[:100]]}


@router.get("/{job_id}/next", summary="Preview the next nominal slots")
async def next_slots(job_id: str, request: Request, tenant: Tenant,
                     count: Annotated[int, Query(ge=1, le=100)] = 5) -> dict[str, Any]:
    job = _own_job(request, tenant, job_id)
    now = clock.now_ms()
    # no horizon: ``count`` slots whenever they exist (4,000 days gave a yearly job 11 of 20)
    slots = await api_state(request).work.run(tenant["tenant"], schedule.slots_between,
                                              job["schedule"], job["job_id"], now, None, count)
    return {"job_id": public_job_id(job), "next": [iso(s) for s in slots]}


RUN_COLUMNS = ("fire_id", "nominal_time", "decision", "reason", "attempts", "outcome",
               "status_code", "error", "fired_at", "completed_at", "lateness_ms", "channel")


# ``only``: the slots that did not run or sent nothing (skipped, expired, recorded not_run, a
# reminder whose recipient is suppressed: the console's "why didn't my job run?" filter), or
# those that failed (each was also written to the DLQ)
RUN_FILTERS = {
    "not_run": " AND (decision LIKE 'skipped%%' OR decision = 'expired_stale' "
               "OR outcome IN ('not_run', 'suppressed')) "
               f"AND coalesce(reason, '') NOT LIKE '{reminders.NOT_NEEDED_REASON}%%'",
    "failed": " AND outcome = 'failed'",
}


def _runs(dsn: str, tenant: str, job_id: str, before: int | None, limit: int,
          only: str | None = None) -> list[dict[str, Any]]:
    """Up to ``limit`` rows of a job's slots from the ledger's sink, newest first, before
    ``before`` (a reminder's slot is a row per channel, in the channels' record id order)."""
    # kind = 'job': the slots' rows, read through the partial index ledger_job_slots
    query = (f"SELECT {', '.join(RUN_COLUMNS)} FROM ledger WHERE kind = 'job' AND tenant = %s "
             "AND job_id = %s "
             "AND (%s::bigint IS NULL OR nominal_time < to_timestamp(%s::bigint / 1000.0) "
             f"AT TIME ZONE 'UTC'){RUN_FILTERS.get(only or '', '')} "
             "ORDER BY nominal_time DESC, record_id LIMIT %s")
    out = []
    for row in sink.rows(dsn, query, (tenant, job_id, before, before, limit)):
        run = dict(zip(RUN_COLUMNS, row, strict=True))
        for name in ("nominal_time", "fired_at", "completed_at"):
            run[name] = iso(utc_ms(run[name])) if run[name] is not None else None
        out.append(run)
    return out


# the most rows one slot has on the ledger: a reminder's two channels, and a slot-wide row the
# reconciler may have written beside them; a page reads this many past its limit
SLOT_ROWS = 3


def runs_page(rows: list[dict[str, Any]], limit: int) -> tuple[list[dict[str, Any]], int | None]:
    """A page of at most ``limit`` slots' rows out of ``rows`` (read with ``limit`` +
    ``SLOT_ROWS``), and the cursor of the next page (None: none). The cursor is a slot's
    nominal time, so a page ends at a slot's last row: a reminder's two channels are one slot,
    and a page that split them would lose the second. A single slot with more rows than
    ``limit`` is a page alone, all of its rows read."""
    if len(rows) <= limit:
        return rows, None
    page, last = rows[:limit], rows[limit - 1]["nominal_time"]
    if rows[limit]["nominal_time"] == last:
        whole = [r for r in page if r["nominal_time"] != last]
        page = whole or [r for r in rows if r["nominal_time"] == last]
    return page, ms(datetime.fromisoformat(page[-1]["nominal_time"].replace("Z", "+00:00")))


@router.get("/{job_id}/runs", summary="Run history from the ledger (newest first)")
async def job_runs(job_id: str, request: Request, tenant: Tenant,
                   cursor: Annotated[int | None, EmptyIsAbsent,
                                     Query(description="from next_cursor")] = None,
                   limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                   only: Annotated[Literal["not_run", "failed"] | None, EmptyIsAbsent, Query(
                       description="not_run: only the slots that did not run or sent "
                                   "nothing (a suppressed recipient); failed: only the failed "
                                   "ones (those dead-lettered)")] = None,
                   ) -> dict[str, Any]:
    job = _own_job(request, tenant, job_id)
    rows = await run_in_threadpool(_runs, api_state(request).conf.pg_dsn, tenant["tenant"],
                                   job["job_id"], cursor, limit + SLOT_ROWS, only)
    runs, next_cursor = runs_page(rows, limit)
    return {"items": runs, "next_cursor": next_cursor}
