"""Every topic record as a type: one ``TypedDict`` per Avro record of ``schemas/``.

Why TypedDicts and not dataclasses: a record is what ``streams.runtime.codec`` decodes, a plain
dict, read millions of times a second in a spike (``bench.deciding``); a TypedDict is that same
dict at run time, so naming a record's type costs nothing, while a type checker and a reader
learn which fields a ``fired`` or a ``job`` has and what each holds. Nested records (a job's
``Schedule`` and ``Target``, a campaign's ``OffsetRange``, a tenant's ``IpPoolWarmup``) have
types of their own.

``tests/unit/test_records.py`` holds these against the schemas, field by field and type by
type: a field added to a schema and not here fails it. Fields are in the schemas' order.
Importing this module does nothing.
"""

from __future__ import annotations

from typing import TypedDict


class Schedule(TypedDict):
    """``schemas/types/schedule.avsc``: exactly one of cron, at_ms, every_s is set."""

    cron: str | None
    timezone: str
    at_ms: int | None
    every_s: int | None
    start_ms: int | None
    end_ms: int | None
    dst_gap: str
    dst_repeat: str


class Target(TypedDict):
    """``schemas/types/target.avsc``: flat on purpose: the fields of other target types stay
    null, so one schema reads all of them."""

    type: str
    url: str | None
    method: str
    headers: dict[str, str]
    body: str | None
    timeout_s: float
    topic: str | None
    key: str | None
    value: str | None
    email_to: str | None
    email_from: str | None
    subject: str | None
    text: str | None
    html: str | None
    campaign_id: str | None
    sms_to: str | None
    sms_body: str | None
    sms_origination: str | None
    sms_quiet_start: str | None
    sms_quiet_end: str | None
    sms_quiet_timezone: str | None
    reminder_channels: list[str] | None
    reminder_deliver: str | None


class OffsetRange(TypedDict):
    """``schemas/campaign.avsc`` (nested)."""

    partition: int
    start: int
    end: int


class Campaign(TypedDict):
    """``schemas/campaign.avsc``: a campaign and its lifecycle."""

    campaign_id: str
    tenant: str
    revision: int
    name: str
    sender: str
    subject: str
    text: str | None
    html: str | None
    send_at_ms: int
    timezone: str
    send_deadline_s: int
    max_rate_per_s: int | None
    ip_pool: str
    status: str
    status_reason: str | None
    upload_id: str | None
    recipients: int
    upload_ranges: list[OffsetRange]
    request_hash: str
    created_ms: int
    updated_ms: int


class DeadLetter(TypedDict):
    """``schemas/dead_letter.avsc``: a slot whose target kept failing after its retries."""

    fire_id: str
    job_id: str
    tenant: str
    nominal_ms: int
    attempts: int
    last_error: str
    last_status_code: int | None
    failed_ms: int
    target: Target


class Fanout(TypedDict):
    """``schemas/fanout.avsc``: the campaign controller's order to one recipient partition:
    send campaign_id's chunks found at [start, end) of that partition."""

    campaign_id: str
    tenant: str
    fire_id: str
    partition: int
    start: int
    end: int
    epoch: int
    issued_ms: int


class Fired(TypedDict):
    """``schemas/fired.avsc``: one due slot the scheduler decided to run."""

    fire_id: str
    job_id: str
    tenant: str
    job_revision: int
    nominal_ms: int
    fired_ms: int
    decision: str
    epoch: int
    target: Target
    overlap: str
    retry_max_attempts: int
    retry_initial_backoff_s: float
    retry_max_backoff_s: float
    redrives: int
    run_by_ms: int | None
    asked_ms: int | None


class Job(TypedDict):
    """``schemas/job.avsc``: a job as the API accepted it."""

    job_id: str
    tenant: str
    revision: int
    paused: bool
    schedule: Schedule
    target: Target
    misfire_policy: str
    max_lateness_s: int
    overlap: str
    retry_max_attempts: int
    retry_initial_backoff_s: float
    retry_max_backoff_s: float
    jitter_s: int
    request_hash: str
    created_ms: int
    updated_ms: int
    name: str | None
    description: str | None
    labels: dict[str, str]
    delete_after_completion: bool


class JobCommand(TypedDict):
    """``schemas/job_command.avsc``: an operator command on one job."""

    command: str
    job_id: str
    tenant: str
    request_id: str
    requested_ms: int
    from_ms: int | None
    to_ms: int | None


class LedgerEntry(TypedDict):
    """``schemas/ledger.avsc``: the recorded decision and outcome of one job slot."""

    record_id: str
    kind: str
    tenant: str
    job_id: str
    fire_id: str
    nominal_time: int
    decision: str
    reason: str | None
    lateness_ms: int
    epoch: int
    attempts: int
    outcome: str
    status_code: int | None
    error: str | None
    fired_at: int | None
    completed_at: int | None
    message_id: str | None
    campaign_id: str | None
    email: str | None
    channel: str | None


class RecipientChunk(TypedDict):
    """``schemas/recipient_chunk.avsc``: up to 50 recipients of one upload that share a
    recipient partition (one SES bulk call)."""

    campaign_id: str
    upload_id: str
    seq: int
    emails: list[str]
    vars: list[dict[str, str]]
    lines: list[int]


class RecipientOutcomes(TypedDict):
    """``schemas/recipient_outcomes.avsc``: the outcomes of one recipient chunk (up to 50
    recipients, one SES bulk call), in parallel arrays: emails[i] had outcomes[i]."""

    chunk_id: str
    tenant: str
    campaign_id: str
    fire_id: str
    nominal_time: int
    epoch: int
    completed_at: int
    emails: list[str]
    outcomes: list[str]
    reasons: list[str]
    message_ids: list[str]
    attempts: list[int]


class SchedulerProgress(TypedDict):
    """``schemas/scheduler_progress.avsc``: per jobs-partition progress mark."""

    partition: int
    fired_through_ms: int
    epoch: int
    worker: str


class SesFeedback(TypedDict):
    """``schemas/ses_feedback.avsc``: one recipient's share of one SES event (Send, Delivery,
    Bounce, Complaint, Reject, DeliveryDelay, ...), as received through SNS and verified by
    the API."""

    tenant: str
    email: str
    event_type: str
    bounce_type: str | None
    bounce_subtype: str | None
    complaint_type: str | None
    delay_type: str | None
    diagnostic: str | None
    ses_message_id: str
    feedback_id: str | None
    event_ms: int
    configuration_set: str | None
    campaign_id: str | None
    chunk: str | None
    sns_message_id: str
    sns_topic_arn: str
    received_ms: int
    raw: str


class Suppression(TypedDict):
    """``schemas/suppression.avsc``: an address that must not be mailed by the tenant."""

    tenant: str
    email: str
    reason: str
    source: str
    created_ms: int
    feedback_id: str | None
    ses_message_id: str | None


class IpPoolWarmup(TypedDict):
    """``schemas/tenant.avsc``: a dedicated IP pool's warm-up plan: the daily send cap starts
    at initial_daily_cap on warmup_start_ms's UTC day and grows by growth per day up to
    max_daily_cap (null: no ceiling once warm)."""

    warmup_start_ms: int
    initial_daily_cap: int
    growth: float
    max_daily_cap: int | None


class Tenant(TypedDict):
    """``schemas/tenant.avsc``: a tenant and its API key (hashed)."""

    tenant: str
    key_sha256: str
    allowed_targets: list[str]
    max_jobs: int
    min_interval_s: int
    requests_per_s: int
    ip_pools: dict[str, IpPoolWarmup]
    senders: list[str]
    pools: list[str]
    max_campaigns: int
    max_recipients: int
    max_suppressions: int
    max_fires_per_s: int
    sms_originations: list[str]
    created_ms: int
