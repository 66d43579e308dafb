"""``/v1/job-imports``: create or delete jobs in bulk.

- ``POST /v1/job-imports``: a JSON body of up to a thousand jobs and job ids to delete, or a
  ``delete_label`` (every job of the tenant carrying it);
- ``POST /v1/job-imports/stream``: a body of any size, streamed, a job (or a delete) per line
  (NDJSON or CSV: ``api.job_lines``).

Validated exactly as ``/v1/jobs`` validates one job, all or nothing: one bad job is a 422 naming
it (``jobs.3.schedule.cron``; a stream names every bad line, up to ``REFUSALS_LISTED``) and
nothing is written. Accepted jobs are readable at once through ``/v1/jobs``, and go live at the
pace the workers apply them (``streams.scheduling.imports``): a million-job import never delays
another tenant's change made through ``/v1/jobs``.
"""

from __future__ import annotations

import os
import struct
import tempfile
import uuid
from collections.abc import Iterator
from typing import IO, Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import ValidationError

from api.auth import current_tenant
from api.errors import problem
from api.job_lines import Create, CsvJobs, Delete, NdjsonJobs, Refused
from api.models import JobImport, JobIn, job_record
from api.routes.jobs import check_job, find_job, label_filter, vet_webhooks, webhook_refusals
from api.state import ApiState, api_state
from api.streamed import body_lines
from streams.runtime import clock
from streams.runtime.codec import codec
from streams.topology import JOB_IMPORTS

router = APIRouter(prefix="/v1/job-imports", tags=["jobs"])
Tenant = Annotated[dict[str, Any], Depends(current_tenant)]
# records written to the store and the topic at a time: the store's commit costs a page of each
# index per job, fewer the more jobs share a page (bench.job_store: 9.6k jobs/s in batches of
# 1,000, 10.8k of 2,000, 13.0k of 5,000), while its lock, held for the batch, keeps every other
# request's write waiting (batches of 5,000: another tenant's create answered in p99 2.9 s)
WRITE_BATCH = 2_000
CHECK_BATCH = 1_000  # a stream's lines checked at a time on the work pool
REFUSALS_LISTED = 100  # bad lines of a stream named in its 422 (all are counted)
IDS_LISTED = 10_000  # a stream's created ids listed in its answer (more: the count only)
KINDS = {"application/x-ndjson": NdjsonJobs, "text/csv": CsvJobs}
DELETE = "delete"  # a refusal's field when a job to delete is not the tenant's


@router.post("", status_code=202, summary="Import (create or delete) jobs in bulk")
async def import_jobs(body: JobImport, request: Request, tenant: Tenant) -> dict[str, Any]:
    """Validation, encoding and the store's writes run on the thread pool: a thousand-job
    request is a good part of a second of CPU, and run on the event loop it held up every other
    request (a one-job ``POST /v1/jobs`` waited p99 3.27 s behind four imports). On a thread,
    the interpreter's switch interval lets the loop answer it in between."""
    api, name = api_state(request), tenant["tenant"]
    label = None if body.delete_label is None else label_filter(body.delete_label,
                                                                 ["body", "delete_label"])
    growth = max(0, len(body.jobs) - len(body.delete))  # deletes free room only once written
    with api.quotas.reserve(name, "jobs", growth, tenant["max_jobs"], lambda: api.job_count(name)):
        records, gone = await api.work.run(name, _prepare, api, body, tenant, clock.now_ms())
        await vet_webhooks(api, tenant, [(["jobs", i], r) for i, r in enumerate(records)])
        labelled = [] if label is None else await run_in_threadpool(_labelled, api, name, label)
        named = set(gone)  # a job named and labelled is deleted once
        written = await api.work.run(name, _encode, records,
                                     gone + [key for key in labelled if key not in named])
        for at in range(0, len(written), WRITE_BATCH):
            await _write(api, written[at:at + WRITE_BATCH])
    return {"created": [r["job_id"] for r in records], "deleted": body.delete,
            **({"deleted_by_label": len(labelled)} if label is not None else {})}


@router.post("/stream", status_code=202,
             summary="Stream an import of any size: application/x-ndjson or text/csv, a job "
                     "(or a delete) per line")
async def stream_import(request: Request, tenant: Tenant) -> dict[str, Any]:
    """Every line is checked before anything is written: the records wait in a file of their
    own (``Spool``) until the body has ended without a bad line (a 422 naming each one, and
    nothing written, otherwise), then go out a thousand at a time as ``POST /v1/job-imports``
    writes them. The tenant's quota is checked as the lines come (a 403 as soon as the import
    would pass it) and held while they are written."""
    api, name = api_state(request), tenant["tenant"]
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in KINDS:
        raise problem(415, "content-type", "use application/x-ndjson or text/csv")
    parser = KINDS[kind]()
    now = clock.now_ms()
    refused: list[Refused] = []
    refused_count = creates = deletes = lines = 0
    ids: list[str] = []
    with Spool(api.conf.home / "imports") as spool:
        pending: list[Create | Delete] = []

        async def check() -> None:
            nonlocal refused_count, creates, deletes
            written, made, bad = await api.work.run(name, _check_lines, api, pending, tenant, now)
            bad += [Refused(int(loc[0]), "target.url", why) for loc, why in
                    await webhook_refusals(api, tenant, made)]
            refused_count += len(bad)
            refused.extend(sorted(bad, key=lambda r: r.line)[:REFUSALS_LISTED - len(refused)])
            if not refused_count:
                spool.add(written)
                creates += len(made)
                deletes += len(written) - len(made)
                ids.extend(r["job_id"] for _, r in made[:IDS_LISTED - len(ids)])
            pending.clear()
            if api.job_count(name) + creates - deletes > tenant["max_jobs"]:
                raise problem(403, "body", f"tenant {name} has reached its quota of "
                              f"{tenant['max_jobs']} jobs: the import was refused at line "
                              f"{lines} and nothing is written", "quota_exceeded")

        async for text in body_lines(request):
            lines += 1
            item = parser.feed(lines, text) if isinstance(text, str) else \
                Refused(lines, "", text.reason)
            if isinstance(item, Refused):
                refused_count += 1
                if len(refused) < REFUSALS_LISTED:
                    refused.append(item)
            elif item is not None:
                pending.append(item)
                if len(pending) >= CHECK_BATCH:
                    await check()
        if isinstance(parser, CsvJobs) and (missing := parser.finish()) is not None:
            refused_count += 1
            refused.append(missing)
        if pending:
            await check()
        if refused_count:
            raise HTTPException(422, detail=[
                {"loc": ["body", "line", r.line, *(r.field.split(".") if r.field else [])],
                 "msg": r.message, "type": "value_error"} for r in refused]
                + ([{"loc": ["body"], "msg": f"{refused_count} bad lines in all, the first "
                     f"{len(refused)} listed; nothing was written", "type": "value_error"}]
                   if refused_count > len(refused) else []))
        growth = max(0, creates - deletes)
        with api.quotas.reserve(name, "jobs", growth, tenant["max_jobs"],
                                lambda: api.job_count(name)):
            for written in spool.batches(WRITE_BATCH):
                await _write(api, written)
    return {"lines": lines, "created": creates, "deleted": deletes,
            **({"ids": ids} if creates <= IDS_LISTED else {"ids_listed": len(ids)})}


async def _write(api: ApiState, written: list[tuple[str, bytes | None]]) -> None:
    """A batch of an import into the API's store and the import topic. The store takes it
    first, and gives it back if the topic refuses it: stored after, the records raced their own
    copies, which the import lane brought back through the jobs topic before the store had
    them, and the view decoded and indexed each job a second time (a fifth of the API's CPU
    while it imported, bench.churn)."""
    undo = await run_in_threadpool(_store, api, written)
    try:
        await api.emitter.acked(JOB_IMPORTS, written)
    except BaseException:
        await run_in_threadpool(api.jobs.put_many, undo)
        raise


def _prepare(api: ApiState, body: JobImport, tenant: dict[str, Any], now: int
             ) -> tuple[list[dict[str, Any]], list[str]]:
    """The records to create and the stored ids to delete, all checked (``_checked``): a 422
    naming the first bad one (``delete.2``, ``jobs.3.schedule.cron``), and then nothing is
    written."""
    gone, made, bad = _checked(api, tenant, now, list(enumerate(body.delete)),
                               list(enumerate(body.jobs)))
    if bad:
        at, field, why, kind = bad[0]
        loc = ["body", "delete", str(at)] if field == DELETE else ["body", "jobs", at,
                                                                   *field.split(".")]
        raise HTTPException(422, detail=[{"loc": loc, "msg": why, "type": kind}])
    return [record for _, record in made], gone


def _checked(api: ApiState, tenant: dict[str, Any], now: int, deletes: list[tuple[int, str]],
             creates: list[tuple[int, JobIn]]
             ) -> tuple[list[str], list[tuple[int, dict[str, Any]]], list[tuple[int, str, str, str]]]:
    """An import's deletes and creates, each with its place (an index of a JSON import, a line
    of a stream), checked as ``/v1/jobs`` checks one: the stored ids to delete (a client-chosen
    id is stored as <tenant>/<id>), the records to create with their place, and every refusal
    as (place, the field's path or ``DELETE`` for a job not found, why, its type); deletes'
    refusals first."""
    name = tenant["tenant"]
    gone: list[str] = []
    made: list[tuple[int, dict[str, Any]]] = []
    bad: list[tuple[int, str, str, str]] = []
    for at, job_id in deletes:
        job = find_job(api, name, job_id)
        if job is None:
            bad.append((at, DELETE, f"job {job_id} not found", "value_error"))
        else:
            gone.append(job["job_id"])
    for (at, body), job_id in zip(creates, fresh_ids(len(creates)), strict=True):
        record = job_record(body, job_id=job_id, tenant=name, revision=1,
                            created_ms=now, updated_ms=now, request_hash="")
        try:
            check_job(record, tenant, now)
        except HTTPException as exc:
            bad += [(at, ".".join(str(step) for step in error["loc"][1:]), error["msg"],
                     error["type"]) for error in exc.detail]
            continue
        made.append((at, record))
    return gone, made, bad


def _encode(records: list[dict[str, Any]], gone: list[str]) -> list[tuple[str, bytes | None]]:
    """The import's records as the topic and the store take them (a tombstone deletes)."""
    encode = codec().encode
    return [(r["job_id"], encode("Job", r)) for r in records] + [(job_id, None) for job_id in gone]


def _store(api: ApiState, written: list[tuple[str, bytes | None]]
           ) -> list[tuple[str, bytes | None]]:
    """What the API reads back at once (``GET /v1/jobs``); returns what undoes it (the records
    the store held before) should the topic refuse the import."""
    before = api.jobs.raws([key for key, _ in written])
    api.jobs.put_many(written)
    return [(key, before.get(key)) for key, _ in written]


def _labelled(api: ApiState, tenant: str, label: tuple[str, str | None]) -> list[str]:
    """The stored ids of every job of ``tenant`` that carries ``label`` (a key and a value, or
    None: any value), read from the store's label index a page at a time."""
    found: list[str] = []
    after: str | None = None
    while True:
        keys, after = api.jobs.by_labels(tenant, [label], None, None, after, WRITE_BATCH)
        found += keys
        if after is None:
            return found


def fresh_ids(count: int) -> list[str]:
    """``count`` random (version 4) UUIDs from one read of the OS's randomness: ``uuid4`` reads
    it once per id, 7 % of the API's CPU while it imported."""
    raw = os.urandom(16 * count)
    return [str(uuid.UUID(bytes=raw[at:at + 16], version=4)) for at in range(0, 16 * count, 16)]


def _check_lines(api: ApiState, items: list[Create | Delete], tenant: dict[str, Any], now: int
                 ) -> tuple[list[tuple[str, bytes | None]],
                            list[tuple[list[str | int], dict[str, Any]]], list[Refused]]:
    """A stream's lines, each read into a job and checked as a JSON import's (``_checked``):
    the records to write (encoded; tombstones for deletes), the new jobs with their line (for
    the webhooks' vetting, done on the loop), and every refusal."""
    bad: list[Refused] = []
    creates: list[tuple[int, JobIn]] = []
    for item in items:
        if isinstance(item, Delete):
            continue
        try:  # a line's JSON straight to the model: a quarter of json.loads and then the model
            creates.append((item.line, JobIn.model_validate_json(item.doc)
                            if isinstance(item.doc, str) else JobIn.model_validate(item.doc)))
        except ValidationError as exc:
            bad += [Refused(item.line, ".".join(str(step) for step in error["loc"]),
                            error["msg"]) for error in exc.errors()]
    gone, made, refused = _checked(
        api, tenant, now, [(item.line, item.job_id) for item in items if isinstance(item, Delete)],
        creates)
    bad += [Refused(line, field, why) for line, field, why, _ in refused]
    return (_encode([record for _, record in made], gone), [([line], record) for line, record in made],
            bad)


class Spool:
    """A stream's encoded records, in a file of their own until every line is checked: an
    import of ten million jobs is gigabytes, never the API's memory. Deleted when closed."""

    FRAME = struct.Struct(">HI")  # key length, value length (NONE: a tombstone)
    NONE = 0xFFFFFFFF

    def __init__(self, directory: Any) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        # closed by __exit__: the spool is the context manager
        self.file: IO[bytes] = tempfile.TemporaryFile(dir=directory)  # noqa: SIM115

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()

    def add(self, records: list[tuple[str, bytes | None]]) -> None:
        for key, value in records:
            raw = key.encode()
            self.file.write(self.FRAME.pack(len(raw), self.NONE if value is None else len(value)))
            self.file.write(raw)
            if value is not None:
                self.file.write(value)

    def batches(self, size: int) -> Iterator[list[tuple[str, bytes | None]]]:
        """The records in the order added, ``size`` at a time."""
        self.file.flush()
        self.file.seek(0)
        batch: list[tuple[str, bytes | None]] = []
        while head := self.file.read(self.FRAME.size):
            key_len, value_len = self.FRAME.unpack(head)
            key = self.file.read(key_len).decode()
            batch.append((key, None if value_len == self.NONE else self.file.read(value_len)))
            if len(batch) == size:
                yield batch
                batch = []
        if batch:
            yield batch
