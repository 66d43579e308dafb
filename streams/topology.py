"""Every topic, table and key of cronstream, declared once.

Read this module to draw the graph: the API produces ``TENANTS``, ``JOBS`` and ``JOB_COMMANDS``
(bulk imports go to ``JOB_IMPORTS``, copied into ``JOBS`` at the pace it is applied);
the scheduler (a reader of its own, ``JOBS_GROUP``) materialises jobs in the ``JOBS_TABLE``
(RocksDB, changelog-backed) a batch at a time, and its punctuator emits due slots to ``FIRED``
plus decisions that need no execution to ``LEDGER``; the executor (a consumer of its own,
``EXECUTOR_GROUP``) reads ``FIRED`` in batches, calls the target and writes the outcome to
``LEDGER`` (compacted, key = record id), which the Debezium JDBC sink upserts into Postgres; failures past
their retries go to ``DLQ``. ``JOBS``, ``JOB_COMMANDS``, ``FIRED`` and ``LEDGER`` are all
partitioned by job id (``partition_for``), so one worker owns a job's definition, its slots, its
executions and its decisions.
"""

from __future__ import annotations

from dataclasses import dataclass

# The partition count of the job-keyed topics is the cluster's (``CRONSTREAM_PARTITIONS``, fixed
# for its life: keys hash to it), a setting this module never reads: whoever has the settings
# passes ``Settings.partitions`` to ``TopicSpec.count`` and ``partition_for``. Its default:
DEFAULT_PARTITIONS = 8


DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class TopicSpec:
    name: str
    key: str
    schema: str
    compacted: bool
    doc: str
    # a count of its own (the tenants topic's 1, Connect's internal topics), or None: the
    # cluster's partition count, given to ``count`` by whoever has the settings
    partitions: int | None = None
    # a delete-policy topic's retention; -1 keeps its records until something deletes them
    # (``cronstream.recipients``: ``streams.campaigns.retention`` prunes what no campaign needs)
    retention_ms: int = 7 * DAY_MS

    def count(self, cluster: int) -> int:
        """This topic's partitions on a cluster whose partitioned topics have ``cluster``
        (``Settings.partitions``)."""
        return self.partitions if self.partitions is not None else cluster

    def configs(self) -> dict[str, str]:
        if self.compacted:
            return {"cleanup.policy": "compact"}
        return {"cleanup.policy": "delete", "retention.ms": str(self.retention_ms)}


@dataclass(frozen=True)
class TableSpec:
    name: str
    source: TopicSpec
    key: str
    doc: str
    # Kept on the other workers as a standby replica (streams.runtime.standbys): worth it where a
    # takeover would otherwise wait on a long changelog (jobs, done fire ids, opt-outs); not for
    # a campaign's per-chunk marks, whose standby reads cost the fan-out 15-25 % on 2 cores.
    standby: bool = True

    def changelog(self, app_id: str) -> str:
        """faust's changelog topic name for this table (``<app id>-<table>-changelog``)."""
        return f"{app_id}-{self.name}-changelog"


JOBS = TopicSpec(
    name="cronstream.jobs", key="job_id", schema="Job", compacted=True,
    doc="Job definitions as accepted by the API; a tombstone deletes.",
)
FIRED = TopicSpec(
    name="cronstream.fired", key="job_id", schema="Fired", compacted=False,
    doc="Due slots to execute, fire id job_id@nominal_time.",
)
LEDGER = TopicSpec(
    name="cronstream.ledger", key="record_id", schema="LedgerEntry", compacted=True,
    doc="One decision/outcome per slot, partitioned by job id; sunk into Postgres.",
)
RECIPIENT_OUTCOMES = TopicSpec(
    name="cronstream.recipient-outcomes", key="campaign_id:upload_id:seq",
    schema="RecipientOutcomes", compacted=True,
    doc="One record per recipient chunk with each recipient's outcome, on the chunk's recipient "
        "partition; sunk into Postgres, where a trigger writes one ledger row per recipient.",
)
TENANTS = TopicSpec(
    name="cronstream.tenants", key="tenant", schema="Tenant", compacted=True,
    doc="Tenants, their hashed API keys, quotas and SSRF allow-lists.", partitions=1,
)
JOB_IMPORTS = TopicSpec(
    name="cronstream.job-imports", key="job_id", schema="Job", compacted=False,
    doc="Bulk job imports and deletes (a tombstone deletes), copied into the jobs topic at the pace "
        "the workers apply it (streams.scheduling.imports).",
)
JOB_COMMANDS = TopicSpec(
    name="cronstream.job-commands", key="job_id", schema="JobCommand", compacted=False,
    doc="trigger / backfill commands for the job's scheduler.",
)
DLQ = TopicSpec(
    name="cronstream.dlq", key="fire_id", schema="DeadLetter", compacted=False,
    doc="Slots whose target still failed after the job's retries, with the last error.",
)
SCHEDULER_PROGRESS = TopicSpec(
    name="cronstream.scheduler-progress", key="partition", schema="SchedulerProgress",
    compacted=True, doc="Per-partition 'fired through' marks of the scheduler.",
)

CAMPAIGNS = TopicSpec(
    name="cronstream.campaigns", key="campaign_id", schema="Campaign", compacted=True,
    doc="Campaign definitions and lifecycle (uploading → ready → scheduled → sending → done).",
)
RECIPIENTS = TopicSpec(
    name="cronstream.recipients", key="campaign_id:upload_id:seq", schema="RecipientChunk",
    compacted=False, doc="Uploaded recipients in chunks of <= 50, on the partition of their address.",
    # kept however far away a campaign's send_at is (7 days lost a list scheduled for next week
    # plus a day, issue 47); what no campaign can read any more is pruned by
    # streams.campaigns.retention
    retention_ms=-1,
)
SUPPRESSIONS = TopicSpec(
    name="cronstream.suppressions", key="tenant:email", schema="Suppression", compacted=True,
    doc="Opt-outs, on the partition of their address (co-partitioned with recipients).",
)
FANOUT = TopicSpec(
    name="cronstream.fanout", key="campaign_id", schema="Fanout", compacted=False,
    doc="The campaign controller's per-recipient-partition send orders.",
    # an order is walked until its campaign's deadline (send_deadline_s, at most 7 days) and
    # redelivered after a restart until it is acknowledged: kept a week past the longest deadline
    retention_ms=14 * DAY_MS,
)

SES_FEEDBACK = TopicSpec(
    name="cronstream.ses-feedback", key="tenant:email", schema="SesFeedback", compacted=False,
    doc="SES events (bounce, complaint, delivery, ...) received through SNS and verified, one "
        "record per recipient on the partition of its address (co-partitioned with recipients "
        "and suppressions), the raw event kept for audit.",
)

TOPICS: tuple[TopicSpec, ...] = (TENANTS, JOBS, JOB_IMPORTS, JOB_COMMANDS, FIRED, LEDGER,
                                 SCHEDULER_PROGRESS, DLQ, CAMPAIGNS, RECIPIENTS, SUPPRESSIONS,
                                 FANOUT, RECIPIENT_OUTCOMES, SES_FEEDBACK)

JOBS_TABLE = TableSpec(
    name="jobs", source=JOBS, key="job_id",
    doc="Current definition of every job of the worker's partitions (raw Avro bytes).",
)
DONE_TABLE = TableSpec(
    name="fires-done", source=FIRED, key="fire_id",
    doc="Fire ids the executor has finished, so a replayed fired record is not run again.",
)
# the done table's value written before an email or a text is sent: it may have left
# (streams.execution.arrivals)
INTENT = b"intent"
# the value written over it when an attempt was answered "not sent" (throttled, not reached)
# and the executor waits to try again: nothing left, so a crash now is not an unknown send
REFUSED = b"refused"
BEGUN = frozenset({INTENT, REFUSED})  # a run's marks before its outcome

SEND_CHUNKS_TABLE = TableSpec(
    name="send-chunks", source=FANOUT, key="campaign_id:upload_id:seq", standby=False,
    doc="Per recipient chunk: 'intent' before each SES call, 'refused' once SES refused it (it "
        "waits to retry), 'done' after its outcomes are on the ledger. An intent without done "
        "after a crash is resolved unknown, never re-sent; a refused chunk is sent.",
)
UNKNOWN_CHUNKS_TABLE = TableSpec(
    name="unknown-chunks", source=FANOUT, key="campaign_id:upload_id:seq", standby=False,
    doc="Per chunk recorded with unknown recipients: its outcomes, until SES events of their "
        "messages resolve them to sent or the window passes; before it is recorded, the "
        "recipients SES events already reported (streams.campaigns.unknown).",
)
SUPPRESSED_TABLE = TableSpec(
    name="suppressed", source=SUPPRESSIONS, key="tenant:email",
    doc="Opt-outs of this worker's recipient partitions, checked at the send step.",
)

POOL_SENDS_TABLE = TableSpec(
    name="pool-sends", source=FANOUT, key="tenant:ip_pool:utc_day:partition", standby=False,
    doc="Emails a recipient partition sent through a warm-up IP pool on a UTC day, against its "
        "share of the pool's daily cap (streams.campaigns.warmup).",
)

ADDRESS_FEEDBACK_TABLE = TableSpec(
    name="address-feedback", source=SES_FEEDBACK, key="tenant:email",
    doc="Per address that bounced or complained: the SES events that had an effect (so a "
        "redelivered one has none) and its recent soft bounces (streams.campaigns.bounces).",
)

REPUTATION_TABLE = TableSpec(
    name="reputation-window", source=SES_FEEDBACK, key="tenant:pool@partition",
    doc="Per tenant and IP pool, on each partition: its recent SES sends, hard bounces and "
        "complaints in time buckets, the reputation guard's rates (streams.campaigns.reputation).",
)

TABLES: tuple[TableSpec, ...] = (JOBS_TABLE, DONE_TABLE, SEND_CHUNKS_TABLE, UNKNOWN_CHUNKS_TABLE,
                                 SUPPRESSED_TABLE, POOL_SENDS_TABLE, ADDRESS_FEEDBACK_TABLE,
                                 REPUTATION_TABLE)

APP_ID = "cronstream"
# The executor's consumer group: it holds the committed offsets of ``FIRED`` and nothing else.
# The executor reads the fired topic with a librdkafka consumer of its own, assigned by hand the
# partitions faust gives its worker of the jobs topic (streams.execution.reader), so the group
# never has members: offsets only.
EXECUTOR_GROUP = f"{APP_ID}-executor"
# The scheduler's group for ``JOBS``, the same way: the job definitions are applied by a reader of
# their own (streams.scheduling.applying), a batch at a time, not by a faust agent.
JOBS_GROUP = f"{APP_ID}-jobs"
# The topic of the workers' group whose assigned partitions are a worker's partitions of every
# job-keyed topic and table (faust assigns co-partitioned topics together). Not ``JOBS``: the
# jobs topic is read by the scheduler's reader, so it is not in the group's subscription.
OWNED = JOB_COMMANDS
# What MirrorMaker 2 copies to the standby region (docs/regions.md, "Replication"): every topic
# above and every table's changelog, under the same names, and the offsets of the groups that
# read them (the sinks' groups are Connect's, connect-<connector>); not Connect's own topics
MIRROR_TOPICS = r"cronstream\..*|cronstream-.*-changelog"
MIRROR_GROUPS = rf"{APP_ID}|{APP_ID}\-executor|{APP_ID}\-jobs|connect-cronstream-.*"


def mirrored_topics() -> list[str]:
    """The names ``MIRROR_TOPICS`` covers: what a planned promotion waits on, what lag reports."""
    import re

    pattern = re.compile(MIRROR_TOPICS)
    names = [t.name for t in TOPICS] + [t.changelog(APP_ID) for t in TABLES]
    return [name for name in names if pattern.fullmatch(name)]


def mirror_offsets_topic(source: str) -> str:
    """Where a dedicated MirrorMaker's source connector commits, in the standby's cluster, how
    far it copied each partition from region ``source``: ``mm2-offsets.<source>.internal``."""
    return f"mm2-offsets.{source}.internal"


LEDGER_SINK_TABLE = "ledger"
OUTCOMES_SINK_TABLE = "recipient_outcomes"
FEEDBACK_SINK_TABLE = "ses_feedback"


@dataclass(frozen=True)
class ProcessorSpec:
    """One node of the graph: a faust agent (stream processor), a punctuator (timer), a client (a
    worker's thread with Kafka clients of its own), or a process outside the workers that reads
    or writes topics (the API, the Connect sink).

    ``tests/unit/test_topology.py`` reads the code and fails when an agent, timer, table or a
    ``produce``/``send`` to a topic is not declared here, so the drawn graph cannot drift.
    """

    name: str
    kind: str  # "agent" | "punctuator" | "client" (a thread with its own Kafka clients) | "api" | "sink"
    module: str
    consumes: tuple[TopicSpec, ...] = ()
    produces: tuple[TopicSpec, ...] = ()
    tables: tuple[TableSpec, ...] = ()
    reads: tuple[TopicSpec, ...] = ()  # read as a view (whole topic, no consumer group)
    doc: str = ""


PROCESSORS: tuple[ProcessorSpec, ...] = (
    ProcessorSpec(
        "api", "api", "api",
        produces=(JOBS, JOB_IMPORTS, JOB_COMMANDS, CAMPAIGNS, RECIPIENTS, SUPPRESSIONS,
                  SES_FEEDBACK),
        reads=(TENANTS, JOBS, CAMPAIGNS),
        doc="HTTP API: validates and writes commands; reads state back from compacted topics.",
    ),
    ProcessorSpec(
        "tenant_create", "api", "streams.adapters.tenants", produces=(TENANTS,),
        doc="`cronstream tenant create`: a tenant and the hash of its API key.",
    ),
    ProcessorSpec(
        "apply_jobs", "client", "streams.scheduling.applying", consumes=(JOBS,),
        tables=(JOBS_TABLE,),
        doc="A librdkafka consumer of its own (group cronstream-jobs, the worker's partitions) "
            "applies job definitions a batch at a time: one RocksDB write batch, one changelog "
            "batch, the in-memory due index; its offsets committed once the changelog holds them.",
    ),
    ProcessorSpec(
        "import_jobs", "client", "streams.scheduling.imports", consumes=(JOB_IMPORTS,),
        produces=(JOBS,),
        doc="A thread of each worker, with its own consumer: copies the imports of the worker's "
            "partitions into the jobs topic while fewer than a window of its copies are "
            "unapplied, so an API change never waits behind a million imported jobs.",
    ),
    ProcessorSpec(
        "apply_job_commands", "agent", "streams.scheduling.agents", consumes=(JOB_COMMANDS,),
        produces=(FIRED,), doc="trigger / backfill: the job's owner emits the slots.",
    ),
    ProcessorSpec(
        "fire_due", "punctuator", "streams.scheduling.agents",
        produces=(FIRED, LEDGER, SCHEDULER_PROGRESS, JOBS),
        tables=(JOBS_TABLE,), reads=(SCHEDULER_PROGRESS,),
        doc="Every 50 ms: decide due slots (fire / skip by misfire policy), mark progress; a job "
            "that asked for delete_after_completion is deleted (a tombstone) once its last "
            "slot's decision is recorded.",
    ),
    ProcessorSpec(
        "reconcile", "punctuator", "streams.scheduling.agents", produces=(FIRED, LEDGER),
        doc="Every 5 s: re-drive slots emitted but never decided (the cleanup crew).",
    ),
    ProcessorSpec(
        "warm_up_standbys", "punctuator", "streams.scheduling.agents", tables=(JOBS_TABLE,),
        doc="Every 100 ms: a step of reading a standby jobs partition into its warm due index "
            "(the changelog keeps it current after that), so a takeover need not rebuild it.",
    ),
    ProcessorSpec(
        "watch_commits", "punctuator", "streams.runtime.commit_watch",
        doc="Every 10 s: seek a partition back to its committed offset when records there never "
            "reached the agent (the group's commits would stop for good).",
    ),
    ProcessorSpec(
        "execute_fired", "client", "streams.execution.executor", consumes=(FIRED,),
        produces=(LEDGER, DLQ, FANOUT), tables=(DONE_TABLE,),
        doc="A librdkafka consumer of its own (group cronstream-executor, the partitions of the "
            "worker's jobs) reads fired slots in batches into the run queue; its dispatcher "
            "starts the next fairly (tenants take turns, a per-host limit, stale turns expired), "
            "records each outcome, resolves the scheduler's pending slot in-process, and marks "
            "the fire ids done in batches.",
    ),
    ProcessorSpec(
        "apply_suppressions", "agent", "streams.campaigns.fanout", consumes=(SUPPRESSIONS,),
        tables=(SUPPRESSED_TABLE,), doc="Opt-outs into the co-partitioned table.",
    ),
    ProcessorSpec(
        "walk_recipients", "agent", "streams.campaigns.fanout", consumes=(FANOUT,),
        produces=(RECIPIENT_OUTCOMES,),
        tables=(SEND_CHUNKS_TABLE, UNKNOWN_CHUNKS_TABLE, SUPPRESSED_TABLE, POOL_SENDS_TABLE),
        reads=(RECIPIENTS, CAMPAIGNS, TENANTS),
        doc="Walks one recipient partition per order: suppress, pace, send via SES, record.",
    ),
    ProcessorSpec(
        "apply_ses_feedback", "agent", "streams.campaigns.apply_feedback",
        consumes=(SES_FEEDBACK,), produces=(SUPPRESSIONS, CAMPAIGNS, RECIPIENT_OUTCOMES),
        tables=(ADDRESS_FEEDBACK_TABLE, REPUTATION_TABLE, SEND_CHUNKS_TABLE,
                UNKNOWN_CHUNKS_TABLE), reads=(CAMPAIGNS,),
        doc="Hard bounces, complaints and repeated soft bounces suppress their address through "
            "the opt-out path, once per SES event however often SNS delivers it; the reputation "
            "guard pauses a tenant's campaigns whose bounce or complaint rate crosses a threshold; "
            "an event of a recipient recorded unknown resolves it to sent.",
    ),
    ProcessorSpec(
        "ledger_sink", "sink", "connectors/ledger-sink.json", consumes=(LEDGER,),
        doc=f"Kafka Connect (Debezium JDBC) upserts the ledger into Postgres table "
            f"`{LEDGER_SINK_TABLE}`.",
    ),
    ProcessorSpec(
        "recipient_outcomes_sink", "sink", "connectors/recipient-outcomes-sink.json",
        consumes=(RECIPIENT_OUTCOMES,),
        doc=f"Kafka Connect (Debezium JDBC) upserts chunk outcomes into Postgres table "
            f"`{OUTCOMES_SINK_TABLE}`; its trigger (connectors/ledger.sql) upserts one "
            f"`{LEDGER_SINK_TABLE}` row per recipient.",
    ),
    ProcessorSpec(
        "ses_feedback_sink", "sink", "connectors/ses-feedback-sink.json", consumes=(SES_FEEDBACK,),
        doc=f"Kafka Connect (Debezium JDBC) upserts SES events into Postgres table "
            f"`{FEEDBACK_SINK_TABLE}` (one row per message, recipient and event type): the "
            f"delivery status beside the ledger and the campaigns' delivery counts.",
    ),
)


def consumer_group(topic: TopicSpec) -> str:
    """The consumer group whose committed offsets say how far ``topic`` is processed."""
    return {FIRED: EXECUTOR_GROUP, JOBS: JOBS_GROUP}.get(topic, APP_ID)


def partition_for(key: str, count: int) -> int:
    """Kafka's default partition of a key (murmur2, as the Java client and faust compute it)
    among ``count`` partitions (``Settings.partitions`` for the partitioned topics).

    Used to place records keyed by something else (a ledger entry keyed by fire id) on the
    partition of their job, so every topic about a job is co-partitioned.
    """
    from aiokafka.partitioner import murmur2

    return (murmur2(key.encode()) & 0x7FFFFFFF) % count
