"""``/v1/jobs``: accept a job, validate its schedule, and write it to the jobs topic."""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from api.models import JobIn, job_record
from streams import schedule
from streams.codec import codec
from streams.topology import JOBS

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

DEFAULT_TENANT = "default"


def _invalid(field: str, message: str) -> JSONResponse:
    return JSONResponse(status_code=422, content={"detail": [
        {"loc": ["body", *field.split(".")], "msg": message, "type": "value_error"}]})


@router.post("", status_code=201)
async def create_job(body: JobIn, request: Request) -> Any:
    job_id = str(uuid.uuid4())
    now = time.time_ns() // 1_000_000
    record = job_record(body, job_id=job_id, tenant=DEFAULT_TENANT, revision=1,
                        created_ms=now, updated_ms=now)
    try:
        schedule.validate(record["schedule"], job_id)
    except schedule.ScheduleError as exc:
        return _invalid(exc.field, exc.message)
    await request.app.state.emitter.send(JOBS, job_id, codec().encode("Job", record))
    preview = []
    cursor = now
    for _ in range(3):
        slot = schedule.next_after(record["schedule"], job_id, cursor)
        if slot is None:
            break
        preview.append(schedule.fire_id(job_id, slot).split("@", 1)[1])
        cursor = slot
    return {"id": job_id, "tenant": DEFAULT_TENANT, "revision": 1, "next": preview,
            **body.model_dump(mode="json")}
