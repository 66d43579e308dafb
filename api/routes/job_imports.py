"""``/v1/job-imports``: create or delete up to a thousand jobs per request.

Validated exactly as ``/v1/jobs`` validates one job, all or nothing: one bad job is a 422 naming
it (``jobs.3.schedule.cron``) and nothing is written. Accepted jobs are readable at once through
``/v1/jobs``, and go live at the pace the workers apply them (``streams.scheduling.imports``):
a million-job import never delays another tenant's change made through ``/v1/jobs``.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool

from api.auth import current_tenant
from api.errors import problem
from api.models import JobImport, job_record
from api.routes.jobs import check_job, find_job, vet_webhooks
from api.state import ApiState, api_state
from streams.runtime import clock
from streams.runtime.codec import codec
from streams.topology import JOB_IMPORTS

router = APIRouter(prefix="/v1/job-imports", tags=["jobs"])
Tenant = Annotated[dict[str, Any], Depends(current_tenant)]


@router.post("", status_code=202, summary="Import (create or delete) jobs in bulk")
async def import_jobs(body: JobImport, request: Request, tenant: Tenant) -> dict[str, Any]:
    """Validation, encoding and the store's writes run on the thread pool. The API accepted
    imports at 1,326 jobs/s in ``bench.churn``, so a thousand-job request is most of a second of
    CPU; run on the event loop it held up every other request, and a one-job ``POST /v1/jobs``
    waited p99 3.27 s behind four imports. On a thread, the interpreter's switch interval lets
    the loop answer it in between."""
    api, name = api_state(request), tenant["tenant"]
    growth = max(0, len(body.jobs) - len(body.delete))  # deletes free room only once written
    with api.quotas.reserve(name, "jobs", growth, tenant["max_jobs"], lambda: api.job_count(name)):
        records, gone = await api.work.run(name, _prepare, api, body, tenant, clock.now_ms())
        await vet_webhooks(api, tenant, [(["jobs", i], r) for i, r in enumerate(records)])
        encode = codec().encode
        await api.emitter.acked(JOB_IMPORTS, [(r["job_id"], encode("Job", r)) for r in records]
                                + [(job_id, None) for job_id in gone])
        await run_in_threadpool(_store, api, records, gone)
    return {"created": [r["job_id"] for r in records], "deleted": body.delete}


def _prepare(api: ApiState, body: JobImport, tenant: dict[str, Any], now: int
             ) -> tuple[list[dict[str, Any]], list[str]]:
    """The records to create and the stored ids to delete, all checked: an HTTPException (422,
    403) for the first bad one, and then nothing is written."""
    name = tenant["tenant"]
    gone = []  # the stored ids (a client-chosen id is stored as <tenant>/<id>)
    for i, job_id in enumerate(body.delete):
        job = find_job(api, name, job_id)
        if job is None:
            raise problem(422, f"delete.{i}", f"job {job_id} not found")
        gone.append(job["job_id"])
    records = []
    for i, job in enumerate(body.jobs):
        record = job_record(job, job_id=str(uuid.uuid4()), tenant=name, revision=1,
                            created_ms=now, updated_ms=now, request_hash="")
        try:
            check_job(record, tenant, now)
        except HTTPException as exc:
            for error in exc.detail:
                error["loc"] = ["body", "jobs", i, *error["loc"][1:]]
            raise
        records.append(record)
    return records, gone


def _store(api: ApiState, records: list[dict[str, Any]], gone: list[str]) -> None:
    """What the API reads back at once (``GET /v1/jobs``), before the view has the topic's."""
    api.jobs.put_many([(record["job_id"], record) for record in records]
                      + [(job_id, None) for job_id in gone])
