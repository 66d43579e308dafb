"""Request bodies of the public API and their mapping onto the Avro records of ``schemas/``."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, model_validator


class Schedule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cron: str | None = Field(None, description="5 fields, or 6 with seconds first; H = hashed")
    timezone: str = Field("UTC", description="IANA time zone the cron is read in")
    at: datetime | None = Field(None, description="one-off RFC 3339 time")
    every_s: int | None = Field(None, ge=1, description="fixed interval in seconds")
    start: datetime | None = None
    end: datetime | None = None

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


class WebhookTarget(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["webhook"]
    url: HttpUrl
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    headers: dict[str, str] = Field(default_factory=dict)
    body: str | None = None
    timeout_s: float = Field(10.0, gt=0, le=60)


class Misfire(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: Literal["fire_once", "fire_all", "skip"] = "fire_once"
    max_lateness_s: int = Field(3600, ge=1)


class JobIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schedule: Schedule
    target: WebhookTarget
    misfire: Misfire = Field(default_factory=Misfire)
    paused: bool = False


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def job_record(body: JobIn, *, job_id: str, tenant: str, revision: int, created_ms: int,
               updated_ms: int) -> dict[str, Any]:
    """The Avro ``Job`` record (schemas/job.avsc) for an accepted request body."""
    s, t = body.schedule, body.target
    return {
        "job_id": job_id,
        "tenant": tenant,
        "revision": revision,
        "paused": body.paused,
        "schedule": {
            "cron": s.cron, "timezone": s.timezone, "at_ms": _ms(s.at), "every_s": s.every_s,
            "start_ms": _ms(s.start), "end_ms": _ms(s.end),
        },
        "target": {
            "type": t.type, "url": str(t.url), "method": t.method, "headers": t.headers,
            "body": t.body, "timeout_s": t.timeout_s,
        },
        "misfire_policy": body.misfire.policy,
        "max_lateness_s": body.misfire.max_lateness_s,
        "created_ms": created_ms,
        "updated_ms": updated_ms,
    }
