"""Request bodies of the public API and their mapping onto the Avro records of ``schemas/``.

Defaults (documented in docs/api.md): timezone UTC; dst gap ``shift``, repeat ``first``;
misfire ``fire_once`` with ``max_lateness_s`` 3600; overlap ``allow``; retry 3 attempts from 1 s
doubling to at most 60 s; ``jitter_s`` 0; webhook method POST, timeout 10 s.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    EmailStr,
    Field,
    HttpUrl,
    field_validator,
    model_validator,
)

from streams.adapters import sms_text
from streams.scheduling import quiet_hours
from streams.scheduling.slots import job_state


def _empty_is_absent(value: Any) -> Any:
    return None if value == "" else value


# A query parameter sent empty is one not sent: many clients ask for a list's first page with
# ``?cursor=`` (an unset next_cursor, formatted), which for an integer cursor was a 422.
EmptyIsAbsent = BeforeValidator(_empty_is_absent)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Dst(Strict):
    gap: Literal["shift", "skip"] = "shift"
    repeat: Literal["first", "last", "both"] = "first"


class Schedule(Strict):
    cron: str | None = Field(None, max_length=200,
                             description="5 fields, or 6 with seconds first; H = hashed per job; "
                                         "L, L-n, nW, LW in day-of-month, d#n and dL in "
                                         "day-of-week (docs/api.md, the cron dialect)")
    timezone: str = Field("UTC", max_length=64, description="IANA zone the cron is read in")
    at: datetime | None = Field(None, description="one-off RFC 3339 time")
    every_s: int | None = Field(None, ge=1, le=366 * 86400, description="fixed interval")
    start: datetime | None = None
    end: datetime | None = None
    dst: Dst = Field(default_factory=Dst)

    @model_validator(mode="after")
    def _one_kind(self) -> Schedule:
        kinds = [k for k in ("cron", "at", "every_s") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("exactly one of cron, at, every_s is required")
        for name in ("at", "start", "end"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                raise ValueError(f"{name} must carry a UTC offset (RFC 3339)")
        return self


HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}")  # RFC 9110's token
BAD_HEADER_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # controls but tab
RESERVED_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "upgrade",
                    "te", "trailer", "keep-alive", "proxy-connection"}


class WebhookTarget(Strict):
    type: Literal["webhook"]
    url: HttpUrl
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    headers: dict[str, str] = Field(default_factory=dict, max_length=50)
    body: str | None = Field(None, max_length=32_768)
    timeout_s: float = Field(10.0, gt=0, le=60)

    @field_validator("headers")
    @classmethod
    def _headers(cls, headers: dict[str, str]) -> dict[str, str]:
        """Refused at creation, not at each call: a CR or LF would split the request (header
        injection), and the HTTP client refuses other malformed headers only when it sends."""
        for name, value in headers.items():
            if not HEADER_NAME.fullmatch(name):
                raise ValueError(f"header name {name!r} is not an HTTP token")
            if name.lower() in RESERVED_HEADERS or name.lower().startswith("x-cronstream-"):
                raise ValueError(f"header {name!r} is set by cronstream or the HTTP client")
            if len(value) > 8_192 or BAD_HEADER_VALUE.search(value):
                raise ValueError(f"header {name!r}: a value of at most 8,192 characters "
                                 "without control characters (CR, LF, NUL)")
        return headers


class KafkaTarget(Strict):
    type: Literal["kafka"]
    topic: str = Field(..., min_length=3, max_length=249, pattern=r"^[A-Za-z0-9._-]+$",
                       description="must start with '<tenant>.'")
    key: str | None = Field(None, max_length=1024)
    value: str | None = Field(None, max_length=32_768)


class EmailTarget(Strict):
    """A single reminder email, sent through SES at most once per fire id."""

    type: Literal["email"]
    to: EmailStr
    from_: EmailStr = Field(..., alias="from")
    subject: str = Field(..., min_length=1, max_length=998)
    text: str | None = Field(None, max_length=100_000)
    html: str | None = Field(None, max_length=200_000)

    @model_validator(mode="after")
    def _a_body(self) -> EmailTarget:
        if self.text is None and self.html is None:
            raise ValueError("one of text or html is required")
        return self


class QuietHours(Strict):
    """A daily window of the recipient's clock in which no text is sent
    (``streams.scheduling.quiet_hours``): a text due inside is held to its end, or expired by
    the job's misfire policy. ``end`` before ``start`` crosses midnight (21:00 to 08:00)."""

    start: str = Field(..., description="HH:MM, 24-hour, on the recipient's clock",
                       examples=["21:00"])
    end: str = Field(..., description="HH:MM; earlier than start: the next morning",
                     examples=["08:00"])
    timezone: str = Field(..., max_length=64, description="the recipient's IANA time zone",
                          examples=["America/New_York"])

    @model_validator(mode="after")
    def _a_window(self) -> QuietHours:
        quiet_hours.parse(self.start, self.end, self.timezone)  # ValueError names the problem
        return self


class SmsTarget(Strict):
    """A text-message reminder through AWS End User Messaging SMS, sent at most once per fire id
    (issue 45; ``streams.execution.targets.send_text``), from an origination the operator
    granted the tenant (``streams.adapters.tenants.sms_refused``, checked at creation and at
    each send)."""

    type: Literal["sms"]
    to: str = Field(..., max_length=32, description="the recipient, E.164 (+15551234567); "
                    "spaces, dashes, dots and parentheses are dropped")
    body: str = Field(..., min_length=1, max_length=sms_text.MAX_BODY_CHARACTERS,
                      description=f"the text: at most {sms_text.MAX_PARTS} SMS parts "
                      f"({sms_text.MAX_PARTS * sms_text.GSM7_PART} GSM-7 characters, "
                      f"{sms_text.MAX_PARTS * sms_text.UCS2_PART} in UCS-2)")
    origination: str | None = Field(None, max_length=256, description="the sending phone "
                                    "number, sender id, pool or their ARN; none: the account's "
                                    "default")
    quiet_hours: QuietHours | None = None

    @field_validator("to")
    @classmethod
    def _e164(cls, value: str) -> str:
        return sms_text.normalize_e164(value)

    @field_validator("body")
    @classmethod
    def _parts(cls, value: str) -> str:
        sms_text.check_body(value)
        return value

    @field_validator("origination")
    @classmethod
    def _origination(cls, value: str | None) -> str | None:
        return None if value is None else sms_text.check_origination(value)


def sms_target_record(t: SmsTarget) -> dict[str, Any]:
    """The ``sms_*`` fields of the flat Avro ``Target`` (schemas/types/target.avsc)."""
    q = t.quiet_hours
    return {"sms_to": t.to, "sms_body": t.body, "sms_origination": t.origination,
            "sms_quiet_start": q.start if q else None, "sms_quiet_end": q.end if q else None,
            "sms_quiet_timezone": q.timezone if q else None}


def sms_target_view(t: dict[str, Any]) -> dict[str, Any]:
    """The public JSON of an ``sms`` target record (the inverse of ``sms_target_record``)."""
    view: dict[str, Any] = {"type": "sms", "to": t["sms_to"], "body": t["sms_body"],
                            "origination": t["sms_origination"], "quiet_hours": None}
    if t["sms_quiet_start"] is not None:
        view["quiet_hours"] = {"start": t["sms_quiet_start"], "end": t["sms_quiet_end"],
                               "timezone": t["sms_quiet_timezone"]}
    return view


Channel = Annotated[EmailTarget | SmsTarget, Field(discriminator="type")]


class ReminderTarget(Strict):
    """A reminder on both channels, an email and a text for each slot (seed 002, issue 45;
    ``streams.execution.reminders``): ``channels`` in the order of preference, each sent at
    most once and recorded as its own ledger entry (``<fire id>#email``, ``<fire id>#sms``).
    ``deliver``: ``all`` sends both; ``fallback`` sends the first, and the second only when the
    first was not sent because its address or number is suppressed (or the text is inside its
    quiet hours)."""

    type: Literal["reminder"]
    channels: list[Channel] = Field(..., min_length=2, max_length=2,
                                    description="one email and one sms channel, the preferred "
                                                "first")
    deliver: Literal["all", "fallback"] = "all"

    @model_validator(mode="after")
    def _one_of_each(self) -> ReminderTarget:
        if {c.type for c in self.channels} != {"email", "sms"}:
            raise ValueError("channels: one email and one sms channel")
        return self


def email_target_record(t: EmailTarget) -> dict[str, Any]:
    """The email fields of the flat Avro ``Target``."""
    return {"email_to": str(t.to), "email_from": str(t.from_), "subject": t.subject,
            "text": t.text, "html": t.html}


def email_target_view(t: dict[str, Any]) -> dict[str, Any]:
    """The public JSON of an ``email`` target record (the inverse of ``email_target_record``)."""
    return {"type": "email", "to": t["email_to"], "from": t["email_from"],
            "subject": t["subject"], "text": t["text"], "html": t["html"]}


def reminder_target_record(t: ReminderTarget) -> dict[str, Any]:
    """A reminder's fields of the flat Avro ``Target``: both channels' own, and their order."""
    record: dict[str, Any] = {"reminder_channels": [c.type for c in t.channels],
                              "reminder_deliver": t.deliver}
    for channel in t.channels:
        record.update(email_target_record(channel) if isinstance(channel, EmailTarget)
                      else sms_target_record(channel))
    return record


def reminder_target_view(t: dict[str, Any]) -> dict[str, Any]:
    """The public JSON of a ``reminder`` target record."""
    views = {"email": email_target_view, "sms": sms_target_view}
    return {"type": "reminder", "channels": [views[c](t) for c in t["reminder_channels"] or []],
            "deliver": t["reminder_deliver"]}


Target = Annotated[WebhookTarget | KafkaTarget | EmailTarget | SmsTarget | ReminderTarget,
                   Field(discriminator="type")]


class Misfire(Strict):
    policy: Literal["fire_once", "fire_all", "skip"] = "fire_once"
    max_lateness_s: int = Field(3600, ge=1, le=30 * 86400)


class Retry(Strict):
    max_attempts: int = Field(3, ge=1, le=20)
    initial_backoff_s: float = Field(1.0, gt=0, le=3600)
    max_backoff_s: float = Field(60.0, gt=0, le=86400)


# A client-chosen job id: EventBridge Scheduler's schedule-name charset and length. No ``/``
# (the stored key is ``<tenant>/<id>``), ``@`` (fire ids are ``job_id@time``) or ``:``.
CLIENT_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")
MAX_LABELS = 50
MAX_LABEL_VALUE = 256
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    """Label keys are what a ``label=key:value`` filter can name (no ``:``, no spaces); values
    are any printable text, so a filter splits at the first ``:`` only."""
    if len(labels) > MAX_LABELS:
        raise ValueError(f"at most {MAX_LABELS} labels")
    for key, value in labels.items():
        if not LABEL_KEY.match(key):
            raise ValueError(f"label key {key[:70]!r} must be 1-63 characters of "
                             "[A-Za-z0-9._/-] starting with a letter or digit")
        if len(value) > MAX_LABEL_VALUE or _CONTROL.search(value):
            raise ValueError(f"label {key!r}: a value is at most {MAX_LABEL_VALUE} characters, "
                             "none of them control characters")
    return labels


class JobIn(Strict):
    schedule: Schedule
    target: Target
    misfire: Misfire = Field(default_factory=Misfire)
    overlap: Literal["allow", "skip", "buffer_one"] = "allow"
    retry: Retry = Field(default_factory=Retry)
    jitter_s: int = Field(0, ge=0, le=3600)
    paused: bool = False
    name: str | None = Field(None, min_length=1, max_length=200)
    description: str | None = Field(None, max_length=2000)
    labels: dict[str, str] = Field(default_factory=dict)
    delete_after_completion: bool = Field(
        False, description="delete the job once its last slot is decided")

    _labels = field_validator("labels")(check_labels)


class JobCreate(JobIn):
    """A new job; ``id`` is the client's (unique within its tenant), else one is generated."""

    id: str | None = Field(None, pattern=CLIENT_ID,
                           description="1-64 of [A-Za-z0-9._-], starting with a letter or digit")


def stored_job_id(tenant: str, client_id: str) -> str:
    """The key a client-chosen id is stored under: tenant-qualified, so two tenants can both
    have a ``nightly-report`` and neither learns of the other's (a 409 only ever names the
    caller's own job). Generated ids are UUIDs, stored as they are."""
    return f"{tenant}/{client_id}"


def public_job_id(job: dict[str, Any]) -> str:
    """The id a tenant sees and names in paths: its own id without the tenant prefix."""
    prefix = job["tenant"] + "/"
    job_id: str = job["job_id"]
    return job_id[len(prefix):] if job_id.startswith(prefix) else job_id


MAX_IMPORT = 1_000  # jobs (or deletes) per import request: about 300 KiB of typical jobs


class JobImport(Strict):
    """A bulk import: jobs to create and job ids to delete, applied at the workers' pace
    (``streams.scheduling.imports``), so other changes never queue behind them."""

    jobs: list[JobIn] = Field(default_factory=list, max_length=MAX_IMPORT)
    delete: list[str] = Field(default_factory=list, max_length=MAX_IMPORT)
    delete_label: str | None = Field(
        None, min_length=1, max_length=200,
        description="delete every job of the tenant with this label (key:value, or key: any value)")

    @model_validator(mode="after")
    def _something(self) -> JobImport:
        if not self.jobs and not self.delete and self.delete_label is None:
            raise ValueError("an import needs at least one of jobs, delete, delete_label")
        if len(set(self.delete)) != len(self.delete):
            raise ValueError("delete names a job id twice")
        return self


class Backfill(Strict):
    from_: datetime = Field(..., alias="from")
    to: datetime

    @model_validator(mode="after")
    def _order(self) -> Backfill:
        if self.from_.tzinfo is None or self.to.tzinfo is None:
            raise ValueError("from and to must carry a UTC offset (RFC 3339)")
        if self.to <= self.from_:
            raise ValueError("to must be after from")
        return self


def ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def iso(value_ms: int | None) -> str | None:
    if value_ms is None:
        return None
    return datetime.fromtimestamp(value_ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


def utc_ms(value: datetime) -> int:
    """Postgres ``timestamp without time zone`` columns from the sink hold UTC."""
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)
    return int(aware.timestamp() * 1000)


def job_record(body: JobIn, *, job_id: str, tenant: str, revision: int, created_ms: int,
               updated_ms: int, request_hash: str) -> dict[str, Any]:
    """The Avro ``Job`` record (schemas/job.avsc) for an accepted request body."""
    s, t = body.schedule, body.target
    target: dict[str, Any] = {"type": t.type}
    if isinstance(t, WebhookTarget):
        target.update(url=str(t.url), method=t.method, headers=t.headers, body=t.body,
                      timeout_s=t.timeout_s)
    elif isinstance(t, EmailTarget):
        target.update(email_target_record(t))
    elif isinstance(t, SmsTarget):
        target.update(sms_target_record(t))
    elif isinstance(t, ReminderTarget):
        target.update(reminder_target_record(t))
    else:
        target.update(topic=t.topic, key=t.key, value=t.value)
    return {
        "job_id": job_id, "tenant": tenant, "revision": revision, "paused": body.paused,
        "schedule": {
            "cron": s.cron, "timezone": s.timezone, "at_ms": ms(s.at), "every_s": s.every_s,
            "start_ms": ms(s.start), "end_ms": ms(s.end), "dst_gap": s.dst.gap,
            "dst_repeat": s.dst.repeat,
        },
        "target": target,
        "misfire_policy": body.misfire.policy, "max_lateness_s": body.misfire.max_lateness_s,
        "overlap": body.overlap, "retry_max_attempts": body.retry.max_attempts,
        "retry_initial_backoff_s": body.retry.initial_backoff_s,
        "retry_max_backoff_s": body.retry.max_backoff_s, "jitter_s": body.jitter_s,
        "request_hash": request_hash, "created_ms": created_ms, "updated_ms": updated_ms,
        "name": body.name, "description": body.description, "labels": body.labels,
        "delete_after_completion": body.delete_after_completion,
    }


def job_view(job: dict[str, Any], now_ms: int) -> dict[str, Any]:
    """The public JSON shape of a job record (the inverse of ``job_record``), with its state
    at ``now_ms`` (``streams.scheduling.slots.job_state``)."""
    s, t = job["schedule"], job["target"]
    schedule: dict[str, Any] = {"timezone": s["timezone"],
                                "dst": {"gap": s["dst_gap"], "repeat": s["dst_repeat"]}}
    for name, value in (("cron", s["cron"]), ("at", iso(s["at_ms"])), ("every_s", s["every_s"]),
                        ("start", iso(s["start_ms"])), ("end", iso(s["end_ms"]))):
        if value is not None:
            schedule[name] = value
    if t["type"] == "webhook":
        target = {k: t[k] for k in ("type", "url", "method", "headers", "body", "timeout_s")}
    elif t["type"] == "email":
        target = email_target_view(t)
    elif t["type"] == "sms":
        target = sms_target_view(t)
    elif t["type"] == "reminder":
        target = reminder_target_view(t)
    else:
        target = {k: t[k] for k in ("type", "topic", "key", "value")}
    return {
        "id": public_job_id(job), "tenant": job["tenant"], "revision": job["revision"],
        "name": job["name"], "description": job["description"], "labels": job["labels"],
        "state": job_state(job, now_ms), "paused": job["paused"],
        "delete_after_completion": job["delete_after_completion"],
        "schedule": schedule, "target": target,
        "misfire": {"policy": job["misfire_policy"], "max_lateness_s": job["max_lateness_s"]},
        "overlap": job["overlap"],
        "retry": {"max_attempts": job["retry_max_attempts"],
                  "initial_backoff_s": job["retry_initial_backoff_s"],
                  "max_backoff_s": job["retry_max_backoff_s"]},
        "jitter_s": job["jitter_s"],
        "created_at": iso(job["created_ms"]), "updated_at": iso(job["updated_ms"]),
    }
