"""``/v1/campaigns``: create a campaign, stream its recipient list, schedule, pause, resume,
cancel; read its progress and any recipient's outcome.

Create + upload is a saga: a campaign is ``ready`` only once its whole upload is on the
recipients topic and the campaign record names where (``upload_ranges``); an upload that fails
or is abandoned is compensated (``aborted``) and its chunks, never named by the campaign, are
never sent. Scheduling turns the campaign into a one-off job (``campaign-<id>``, target
``campaign``), so the scheduler's guarantees (a decision per slot, misfire, fencing) apply.
"""

from __future__ import annotations

import hashlib
import shutil
import threading
import uuid
from datetime import datetime
from typing import Annotated, Any

import psycopg
from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, EmailStr, Field, model_validator
from rocksdict import Rdict

from api import sink
from api.auth import current_tenant
from api.errors import problem
from api.models import iso, ms, utc_ms
from api.routes.jobs import IDEMPOTENCY_NAMESPACE
from api.state import ApiState, api_state
from api.streamed import body_lines
from streams.adapters import tenants
from streams.campaigns import lifecycle, recipients, retention
from streams.ledger import CAMPAIGN_OUTCOMES
from streams.runtime import clock
from streams.runtime.codec import codec
from streams.scheduling import schedule
from streams.topology import JOBS, RECIPIENTS

router = APIRouter(prefix="/v1/campaigns", tags=["campaigns"])
Tenant = Annotated[dict[str, Any], Depends(current_tenant)]
BAD_ROWS_LISTED = 1000
UPLOAD_STALE_MS = 3600_000  # an upload silent this long is abandoned


class CampaignIn(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    id: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]{1,64}$")
    name: str = Field(..., min_length=1, max_length=200)
    from_: EmailStr = Field(..., alias="from")
    subject: str = Field(..., min_length=1, max_length=998)
    text: str | None = Field(None, max_length=100_000)
    html: str | None = Field(None, max_length=200_000)
    send_at: datetime
    timezone: str = Field("UTC", max_length=64)
    send_deadline_s: int = Field(3600, ge=60, le=7 * 86400,
                                 description="nothing leaves later than send_at + this")
    max_rate_per_s: int | None = Field(None, ge=1, le=100_000)
    ip_pool: str = Field("default", pattern=r"^[A-Za-z0-9_-]{1,64}$")

    @model_validator(mode="after")
    def _check(self) -> CampaignIn:
        if self.text is None and self.html is None:
            raise ValueError("one of text or html is required")
        if self.send_at.tzinfo is None:
            raise ValueError("send_at must carry a UTC offset (RFC 3339)")
        return self



# A client-chosen campaign id is stored as ``<tenant>_<id>``: a tenant's name has no ``_``, so
# the key reads one way, and two tenants can both have a ``spring-sale``. Before, ids were
# global: a 409 told a tenant another's id existed, an id could be squatted, and the ledger's
# ``<campaign>:<email>`` keys carried no tenant (issue 40). Generated ids (UUIDs; the
# Idempotency-Key's includes the tenant) are stored as they are, and so are the campaigns made
# before: found by their bare id when their tenant asks (``find_campaign``), their ledger rows
# unchanged.
SCOPE = "_"


def stored_campaign_id(tenant: str, client_id: str) -> str:
    return f"{tenant}{SCOPE}{client_id}"


def public_campaign_id(campaign: dict[str, Any]) -> str:
    """The id the tenant sees and names in paths: its own id without the tenant prefix."""
    prefix = f"{campaign['tenant']}{SCOPE}"
    cid: str = campaign["campaign_id"]
    return cid[len(prefix):] if cid.startswith(prefix) else cid


def find_campaign(api: ApiState, tenant: str, campaign_id: str) -> dict[str, Any] | None:
    """The tenant's campaign ``campaign_id`` names (client-chosen, generated, or stored before
    ids were scoped); another tenant's is never found."""
    for key in (stored_campaign_id(tenant, campaign_id), campaign_id):
        campaign = api.campaigns.get(key)
        if campaign is not None and campaign["tenant"] == tenant:
            return campaign
    return None


def campaign_view(c: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": public_campaign_id(c), "name": c["name"], "from": c["sender"], "subject": c["subject"],
        "text": c["text"], "html": c["html"], "send_at": iso(c["send_at_ms"]),
        "timezone": c["timezone"], "send_deadline_s": c["send_deadline_s"],
        "max_rate_per_s": c["max_rate_per_s"], "ip_pool": c["ip_pool"], "status": c["status"],
        "status_reason": c["status_reason"], "recipients": c["recipients"],
        "created_at": iso(c["created_ms"]), "updated_at": iso(c["updated_ms"]),
    }


def _own(request: Request, tenant: dict[str, Any], campaign_id: str) -> dict[str, Any]:
    campaign = find_campaign(api_state(request), tenant["tenant"], campaign_id)
    if campaign is None:
        raise problem(404, "", f"campaign {campaign_id} not found")
    return campaign


async def _save(request: Request, campaign: dict[str, Any], **changes: Any) -> dict[str, Any]:
    record = lifecycle.revised(campaign, clock.now_ms(), **changes)
    api = api_state(request)
    await lifecycle.write(api.emitter, record)
    api.campaigns.put(record["campaign_id"], record)
    return record


@router.post("", status_code=201, summary="Create a campaign (honours Idempotency-Key)")
async def create_campaign(body: CampaignIn, request: Request, response: Response,
                          tenant: Tenant,
                          idempotency_key: Annotated[str | None, Header(max_length=200)] = None
                          ) -> dict[str, Any]:
    api = api_state(request)
    digest = hashlib.sha256(body.model_dump_json().encode()).hexdigest()
    if body.id:
        public, campaign_id = body.id, stored_campaign_id(tenant["tenant"], body.id)
        taken = api.campaigns.get(campaign_id)
        if taken is not None and taken["tenant"] != tenant["tenant"]:
            # a campaign of before the scoping whose bare id spells this key: not the caller's,
            # and never overwritten (which tenant holds it is not said)
            raise problem(409, "id", f"campaign id {body.id} is not available", "id_conflict")
    elif idempotency_key:
        public = campaign_id = str(uuid.uuid5(IDEMPOTENCY_NAMESPACE,
                                              f"{tenant['tenant']}:c:{idempotency_key}"))
    else:
        public = campaign_id = str(uuid.uuid4())
    existing = find_campaign(api, tenant["tenant"], public)
    if existing is not None:
        if existing["request_hash"] != digest:
            raise problem(409, "id", f"campaign {public} already exists with another body",
                          "idempotency_conflict")
        response.status_code = 200
        response.headers["Idempotent-Replayed"] = "true"
        return campaign_view(existing)
    if (refused := tenants.mail_refused(tenant, str(body.from_), body.ip_pool)) is not None:
        raise problem(422, *refused, "not_granted")
    try:
        schedule.zone(body.timezone)
    except schedule.ScheduleError as exc:
        raise problem(422, "timezone", exc.message) from exc
    now = clock.now_ms()
    send_at = ms(body.send_at)
    assert send_at is not None
    if send_at + body.send_deadline_s * 1000 < now:
        raise problem(422, "send_at", "send_at + send_deadline_s is already past")
    await _keepable(request, send_at, body.send_deadline_s, now)
    record = {
        "campaign_id": campaign_id, "tenant": tenant["tenant"], "revision": 0,
        "name": body.name, "sender": str(body.from_), "subject": body.subject,
        "text": body.text, "html": body.html, "send_at_ms": send_at,
        "timezone": body.timezone, "send_deadline_s": body.send_deadline_s,
        "max_rate_per_s": body.max_rate_per_s, "ip_pool": body.ip_pool, "status": "created",
        "status_reason": "waiting for the recipient upload", "upload_id": None,
        "recipients": 0, "upload_ranges": [], "request_hash": digest,
        "created_ms": now, "updated_ms": now,
    }
    name = tenant["tenant"]
    with api.quotas.reserve(name, "campaigns", 1, tenant["max_campaigns"],
                            lambda: api.campaign_count(name)):
        return campaign_view(await _save(request, record))


class OverQuota(Exception):
    """An upload past the tenant's ``max_recipients``: refused and rolled back."""


class _Offsets:
    """First and last offset written per partition, from delivery reports (producer thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ranges: dict[int, list[int]] = {}
        self.errors: list[str] = []

    def delivered(self, err: Any, msg: Any) -> None:
        with self.lock:
            if err is not None:
                self.errors.append(str(err))
                return
            span = self.ranges.setdefault(msg.partition(), [msg.offset(), msg.offset()])
            span[0], span[1] = min(span[0], msg.offset()), max(span[1], msg.offset())


@router.put("/{campaign_id}/recipients",
            summary="Stream the recipient list (text/csv with an email column, or "
                    "application/x-ndjson); bad rows are reported and skipped")
async def upload_recipients(campaign_id: str, request: Request, tenant: Tenant
                            ) -> dict[str, Any]:
    api = api_state(request)
    campaign = _own(request, tenant, campaign_id)
    campaign_id = campaign["campaign_id"]  # the stored id, on every record of the upload
    now = clock.now_ms()
    stale_upload = campaign["status"] == "uploading" and now - campaign["updated_ms"] > UPLOAD_STALE_MS
    if campaign["status"] not in ("created", "ready", "aborted") and not stale_upload:
        raise problem(409, "", f"campaign is {campaign['status']}; recipients can be uploaded "
                      "while it is created, ready or aborted")
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in ("text/csv", "application/x-ndjson"):
        raise problem(415, "content-type", "use text/csv or application/x-ndjson")
    upload_id = uuid.uuid4().hex[:12]
    campaign = await _save(request, campaign, status="uploading", upload_id=upload_id,
                           status_reason="upload in progress", recipients=0, upload_ranges=[])
    seen_dir = api.conf.home / "uploads" / upload_id
    seen_dir.parent.mkdir(parents=True, exist_ok=True)
    seen = Rdict(str(seen_dir))
    chunker = recipients.Chunker(api.conf.partitions, seen)
    offsets = _Offsets()
    bad: list[dict[str, Any]] = []
    seq = 0

    def emit(part: int, rows: list[recipients.Row]) -> None:
        nonlocal seq
        seq += 1
        chunk = {"campaign_id": campaign_id, "upload_id": upload_id, "seq": seq,
                 "emails": [r.email for r in rows], "vars": [r.vars for r in rows],
                 "lines": [r.line for r in rows]}
        api.emitter.produce(RECIPIENTS, f"{campaign_id}:{upload_id}:{seq}",
                            codec().encode("RecipientChunk", chunk), part, offsets.delivered)

    parser = recipients.CsvRows() if kind == "text/csv" else recipients.NdjsonRows()
    bad_total = 0

    def reject(line: int, reason: str) -> None:
        nonlocal bad_total
        bad_total += 1
        if len(bad) < BAD_ROWS_LISTED:
            bad.append({"line": line, "reason": reason})

    try:
        number = 0
        async for text in body_lines(request):
            number += 1
            if isinstance(text, recipients.BadRow) and isinstance(parser, recipients.CsvRows) \
                    and parser.header is None:
                raise ValueError(f"line 1, the CSV header: {text.reason}")
            item = parser.feed(number, text) if isinstance(text, str) else recipients.BadRow(
                number, text.reason)
            if isinstance(item, recipients.BadRow):
                reject(item.line, item.reason)
            elif item is not None and (full := chunker.add(item)) is not None:
                emit(*full)
            if chunker.accepted > tenant["max_recipients"]:
                raise OverQuota(f"the upload holds more than the tenant's quota of "
                                f"{tenant['max_recipients']} recipients")
        if isinstance(parser, recipients.CsvRows) and parser.header is None:
            reject(1, "empty upload: a header with an 'email' column is required")
        for part, rows in chunker.rest():
            emit(part, rows)
        undelivered = await run_in_threadpool(api.emitter.flush, 120)
        if undelivered or offsets.errors:
            raise RuntimeError(f"{undelivered} chunks not acknowledged; {offsets.errors[:3]}")
    except Exception as exc:
        await _save(request, campaign, status="aborted",
                    status_reason=f"upload {upload_id} failed: {exc}"[:500])
        if isinstance(exc, OverQuota):
            raise problem(403, "body", f"upload refused and rolled back: {exc}",
                          "quota_exceeded") from exc
        raise problem(400, "body", f"upload failed and was rolled back: {exc}") from exc
    finally:
        seen.close()
        shutil.rmtree(seen_dir, ignore_errors=True)
    ranges = [{"partition": p, "start": lo, "end": hi + 1}
              for p, (lo, hi) in sorted(offsets.ranges.items())]
    await _save(request, campaign, status="ready", recipients=chunker.accepted,
                upload_ranges=ranges, status_reason=None)
    return {"campaign_id": public_campaign_id(campaign), "upload_id": upload_id, "status": "ready",
            "recipients": chunker.accepted, "duplicates": chunker.duplicates,
            "bad_rows": bad_total, "bad_rows_listed": bad}


async def _keepable(request: Request, send_at_ms: int, send_deadline_s: int,
                    uploaded_from_ms: int) -> None:
    """422 with the reason for a campaign whose recipients the cluster would delete before its
    deadline (a finite ``retention.ms`` on cronstream.recipients: ``streams.campaigns.retention``);
    503 when Kafka does not say, so nothing is accepted that might not be kept."""
    try:
        kept_ms = await run_in_threadpool(api_state(request).recipients_retention_ms)
    except Exception as exc:  # noqa: BLE001 - any failure to ask is the same answer
        raise problem(503, "", f"could not read {RECIPIENTS.name}'s retention.ms from Kafka; "
                      f"try again ({exc})") from exc
    reason = retention.refusal(send_at_ms, send_deadline_s, uploaded_from_ms, kept_ms)
    if reason is not None:
        raise problem(422, "send_at", reason, "not_kept")


@router.post("/{campaign_id}/schedule", summary="Schedule the send at send_at")
async def schedule_campaign(campaign_id: str, request: Request, tenant: Tenant
                            ) -> dict[str, Any]:
    campaign = _own(request, tenant, campaign_id)
    campaign_id = campaign["campaign_id"]
    if campaign["status"] != "ready":
        raise problem(409, "", f"campaign is {campaign['status']}; only a ready campaign (its "
                      "upload committed) can be scheduled")
    # its chunks were written after it was created: kept at least that long from then
    await _keepable(request, campaign["send_at_ms"], campaign["send_deadline_s"],
                    campaign["created_ms"])
    now = clock.now_ms()
    job_id = f"campaign-{campaign_id}"
    job = {
        "job_id": job_id, "tenant": tenant["tenant"], "revision": 1, "paused": False,
        "schedule": {"cron": None, "timezone": campaign["timezone"],
                     "at_ms": max(campaign["send_at_ms"], now), "every_s": None,
                     "start_ms": None, "end_ms": None},
        "target": {"type": "campaign", "campaign_id": campaign_id},
        "misfire_policy": "fire_once", "max_lateness_s": campaign["send_deadline_s"],
        "overlap": "allow", "retry_max_attempts": 5, "retry_initial_backoff_s": 1.0,
        "retry_max_backoff_s": 30.0, "jitter_s": 0, "request_hash": "",
        "created_ms": now, "updated_ms": now,
    }
    api = api_state(request)
    await api.emitter.send(JOBS, job_id, codec().encode("Job", job))
    api.jobs.put(job_id, job)
    return campaign_view(await _save(request, campaign, status="scheduled", status_reason=None))


async def _transition(request: Request, tenant: dict[str, Any], campaign_id: str,
                      allowed: tuple[str, ...], status: str) -> dict[str, Any]:
    campaign = _own(request, tenant, campaign_id)
    if campaign["status"] == status:
        return campaign_view(campaign)
    if campaign["status"] not in allowed:
        raise problem(409, "", f"campaign is {campaign['status']}; cannot become {status}")
    return campaign_view(await _save(request, campaign, status=status, status_reason=None))


@router.post("/{campaign_id}/pause", summary="Stop starting sends until resumed")
async def pause_campaign(campaign_id: str, request: Request, tenant: Tenant) -> dict[str, Any]:
    return await _transition(request, tenant, campaign_id, ("scheduled",), "paused")


@router.post("/{campaign_id}/resume")
async def resume_campaign(campaign_id: str, request: Request, tenant: Tenant) -> dict[str, Any]:
    return await _transition(request, tenant, campaign_id, ("paused",), "scheduled")


@router.post("/{campaign_id}/cancel", summary="Stop for good; unsent recipients are cancelled")
async def cancel_campaign(campaign_id: str, request: Request, tenant: Tenant) -> dict[str, Any]:
    return await _transition(request, tenant, campaign_id,
                             ("created", "ready", "scheduled", "paused", "aborted"), "cancelled")


# what SES said happened to the campaign's mail after it accepted it, each recipient counted
# once however often SNS delivered the event (the sink upserts on message id, email, type):
# delivered (a complaint was delivered first), bounced (hard bounces), complained
DELIVERY_COUNTS = ("delivered", "bounced", "complained")


def _counts(dsn: str, tenant: str, campaign_id: str) -> tuple[dict[str, int], int]:
    """The campaign's recipients per outcome and per delivery count (``DELIVERY_COUNTS``), and
    how many reached the ledger in the last 10 s (the rate its pending count falls at), from
    the counts the ledger's triggers keep (connectors/ledger.sql, ``campaign_counts``): a few
    rows per second of the send, never the campaign's ledger or feedback rows."""
    query = ("SELECT outcome, sum(n)::bigint, coalesce(sum(n) FILTER (WHERE at_second > "
             "floor(EXTRACT(EPOCH FROM now())) - 10), 0)::bigint FROM campaign_counts "
             "WHERE tenant = %s AND campaign_id = %s GROUP BY outcome")
    try:
        with psycopg.connect(dsn, connect_timeout=5) as conn:
            rows = conn.execute(query, (tenant, campaign_id)).fetchall()
    except psycopg.errors.UndefinedTable:  # before the stack applied connectors/ledger.sql
        return {}, 0
    # an outcome whose total is back to 0 still gives its recent moves to the rate: the last
    # unknown recipients resolved to sent are +k sent and -k unknown, no progress
    return {row[0]: row[1] for row in rows}, sum(row[2] for row in rows)


@router.get("/{campaign_id}", summary="Status and counts, with rate and ETA")
async def get_campaign(campaign_id: str, request: Request, tenant: Tenant) -> dict[str, Any]:
    campaign = _own(request, tenant, campaign_id)
    counts, recent = await run_in_threadpool(_counts, api_state(request).conf.pg_dsn,
                                             tenant["tenant"], campaign["campaign_id"])
    view = campaign_view(campaign)
    totals = {name: counts.get(name, 0) for name in CAMPAIGN_OUTCOMES}
    pending = max(0, campaign["recipients"] - sum(totals.values()))
    rate = recent / 10
    if campaign["status"] == "scheduled" and clock.now_ms() >= campaign["send_at_ms"]:
        view["status"] = "sending" if pending else "done"
    delivery = {name: counts.get(name, 0) for name in DELIVERY_COUNTS}
    view.update(counts={**totals, "pending": pending, **delivery}, rate_per_s=rate,
                eta_s=round(pending / rate) if rate and pending else None)
    return view


@router.get("/{campaign_id}/unknown", summary="Recipients whose send's outcome is unknown")
async def unknown_recipients(campaign_id: str, request: Request, tenant: Tenant,
                             limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                             after: Annotated[str, Query(max_length=320)] = "") -> dict[str, Any]:
    """The recipients recorded ``unknown`` (a request that may have been accepted got no answer;
    never re-sent), in address order from ``after``. Each is ``awaiting_events`` while an SES
    event of its message can still resolve it to sent (``CRONSTREAM_UNKNOWN_WINDOW_S`` after it
    was recorded: ``streams.campaigns.unknown``), ``unresolved`` after that."""
    campaign = _own(request, tenant, campaign_id)
    window_s = api_state(request).conf.unknown_window_s

    rows = await run_in_threadpool(
        sink.rows, api_state(request).conf.pg_dsn,
        "SELECT email, reason, completed_at FROM ledger WHERE kind = 'campaign' "
        "AND tenant = %s AND campaign_id = %s AND outcome = 'unknown' "
        "AND email > %s ORDER BY email LIMIT %s",
        (tenant["tenant"], campaign["campaign_id"], after, limit))
    now = clock.now_ms()
    items = []
    for email, reason, completed in rows:
        until = utc_ms(completed) + window_s * 1000
        items.append({"email": email, "reason": reason, "at": iso(utc_ms(completed)),
                      "resolvable_until": iso(until),
                      "state": "awaiting_events" if now <= until else "unresolved"})
    return {"campaign_id": public_campaign_id(campaign), "window_s": window_s, "items": items,
            "next_after": items[-1]["email"] if len(items) == limit else None}


@router.get("/{campaign_id}/recipients/{email}", summary="One address's outcome")
async def recipient_outcome(campaign_id: str, email: str, request: Request, tenant: Tenant
                            ) -> dict[str, Any]:
    campaign = _own(request, tenant, campaign_id)
    address = recipients.normalise(email)
    if address is None:
        raise problem(422, "email", "not an email address")

    def lookup() -> tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]:
        with psycopg.connect(api_state(request).conf.pg_dsn, connect_timeout=5) as conn:
            try:
                sent = conn.execute(
                    "SELECT outcome, reason, completed_at, message_id, attempts FROM ledger "
                    "WHERE record_id = %s AND tenant = %s",
                    (f"{campaign['campaign_id']}:{address}", tenant["tenant"])).fetchone()
            except psycopg.errors.UndefinedTable:
                return None, None
            try:
                delivery = conn.execute(
                    "SELECT delivery_status, delivery_at, diagnostic FROM campaign_delivery "
                    "WHERE tenant = %s AND campaign_id = %s AND email = %s",
                    (tenant["tenant"], campaign["campaign_id"], address)).fetchone()
            except psycopg.errors.UndefinedTable:
                delivery = None
            return sent, delivery

    row, delivery = await run_in_threadpool(lookup)
    if row is None:
        return {"campaign_id": public_campaign_id(campaign), "email": address, "outcome": "pending"
                if campaign["recipients"] else "unknown_recipient"}
    completed = row[2]
    return {"campaign_id": public_campaign_id(campaign), "email": address, "outcome": row[0],
            "reason": row[1],
            "at": iso(utc_ms(completed)) if completed else None,
            "message_id": row[3], "attempts": row[4],
            # what SES's events say became of it since (None: no event yet)
            "delivery_status": delivery[0] if delivery else None,
            "delivery_at": iso(utc_ms(delivery[1])) if delivery else None,
            "delivery_diagnostic": delivery[2] if delivery else None}
