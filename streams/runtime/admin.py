"""Creates cronstream's topics as ``topology`` declares them, idempotently.

Topics are created up front (by ``stack up``, the API and workers at start) rather than left to
broker auto-creation, so partition counts and compaction are always what the topology says.
"""

from __future__ import annotations

import ctypes
import logging
import re
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec

from streams.runtime.kafka_config import (
    KafkaSecurity,
    Replication,
    client_config,
    replication_for,
)
from streams.topology import (
    APP_ID,
    EXECUTOR_GROUP,
    FIRED,
    JOBS,
    JOBS_GROUP,
    PROCESSORS,
    TABLES,
    TOPICS,
    TopicSpec,
)


def changelog_topics() -> tuple[TopicSpec, ...]:
    """faust's changelog topic of every table, created up front with its source's partition
    count (left to faust, a worker's first start can race their creation and crash)."""
    return tuple(
        TopicSpec(name=t.changelog(APP_ID), key=t.key, schema="", compacted=True,
                  doc=f"changelog of table {t.name}", partitions=t.source.partitions)
        for t in TABLES)


# Kafka Connect's internal topics (stack.local writes them into the Connect worker's config):
# created here like every other topic, so they are replicated as the cluster's setting says
# (Connect alone would create them with the factor its own config names, and no minimum ISR).
CONNECT_TOPICS = (
    TopicSpec(name="cronstream-connect-configs", key="", schema="", compacted=True,
              doc="Kafka Connect's connector configs", partitions=1),
    TopicSpec(name="cronstream-connect-offsets", key="", schema="", compacted=True,
              doc="Kafka Connect's source offsets", partitions=5),
    TopicSpec(name="cronstream-connect-status", key="", schema="", compacted=True,
              doc="Kafka Connect's connector and task states", partitions=1),
)

log = logging.getLogger(__name__)
T = TypeVar("T")


_CLIENTS: dict[str, AdminClient] = {}
_LOCK = threading.Lock()


def client(bootstrap: str) -> AdminClient:
    """The process's one AdminClient per cluster. Why not one per call: librdkafka aborts the
    process (``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0'``) when an
    AdminClient is destroyed while a request of it is still pending, which a per-call client
    does whenever a broker is down — seen killing a worker during a broker restart."""
    with _LOCK:
        if bootstrap not in _CLIENTS:
            _CLIENTS[bootstrap] = AdminClient(client_config(bootstrap))
        return _CLIENTS[bootstrap]


def _keep_forever(old: AdminClient) -> None:
    """Never destroy an AdminClient: destroying one with a request pending aborts the process
    (above), destroying a stuck one blocked ``stack down`` for minutes, and one destroyed at
    interpreter exit after the broker was gone made librdkafka wait forever. The extra reference
    keeps it alive through interpreter shutdown; the process's exit ends its threads."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(old))


def replace_client(bootstrap: str, why: str = "after repeated timeouts",
                   failed: AdminClient | None = None) -> None:
    """Start a new AdminClient for the cluster. After a broker restart a worker's client was
    seen timing out on every request for minutes while a new one answered at once. The old
    client is kept, never destroyed (``_keep_forever``): one per outage is a small price.
    ``failed``: the client a request failed on; if another thread has replaced it already, its
    successor is kept (threads failing together would each replace the last one's new client)."""
    with _LOCK:
        if failed is not None and _CLIENTS.get(bootstrap) is not failed:
            return
        old = _CLIENTS.pop(bootstrap, None)
        if old is not None:
            _keep_forever(old)
    log.warning("AdminClient for %s replaced %s", bootstrap, why)


STUCK_AFTER = 3  # failed requests in a row before a client is taken for stuck
_FAILURES: dict[str, int] = {}
# a partition's leader epoch, as this client's metadata has it, is older than its leader's (not
# UNKNOWN_LEADER_EPOCH, newer: the broker has yet to catch up, and a new client would not help)
STALE_EPOCH = frozenset({KafkaError.FENCED_LEADER_EPOCH})


def stale_epoch(exc: BaseException) -> bool:
    """Whether a request failed because the client's metadata names an old leader epoch.

    Why it matters: librdkafka's ListOffsets retries such a request as it was first encoded,
    the old epoch in it, until its timeout (``rd_kafka_handle_ListOffsets`` retries the same
    buffer after refreshing the metadata; the consumer's side of it was
    confluentinc/librdkafka#4620), and the AdminClient kept failing so after every broker of a
    rolling restart came back: the scheduler's read of its fired tail waited its 10 s timeout
    inside a recovery, firing stalled 18 s, and the opt-out barrier's failed rounds held sending
    for 35 s (tests/chaos/test_cluster_faults.py, 2026-11-30). A new client reads fresh metadata
    and answers at once."""
    if not isinstance(exc, KafkaException) or not exc.args:
        return False
    error = exc.args[0]
    return isinstance(error, KafkaError) and error.code() in STALE_EPOCH


def call(bootstrap: str, request: Callable[[AdminClient], T]) -> T:
    """Run ``request`` on the process's AdminClient. After ``STUCK_AFTER`` failures in a row the
    client is replaced (``replace_client``): after a broker restart a stuck client held every
    send at the fence and kept a worker's topic views from ever catching up. Why not at the
    first failure: on a fresh cluster the first group request times out (the coordinator is
    loading), and a client replaced then — kept alive with that timed-out request — aborted the
    process (librdkafka) at the next broker restart, in two fresh-clone runs of the test suite.
    A request refused for a stale leader epoch (``stale_epoch``) has ended, so its client is
    replaced at once and the request asked once more of the new one (every request made here
    reads, or writes what it would write again)."""
    for attempt in (1, 2):
        used = client(bootstrap)
        try:
            result = request(used)
        except Exception as exc:
            stale = attempt == 1 and stale_epoch(exc)
            with _LOCK:
                failures = _FAILURES[bootstrap] = _FAILURES.get(bootstrap, 0) + 1
                stuck = failures >= STUCK_AFTER
                if stuck or stale:
                    _FAILURES[bootstrap] = 0
            if stale:
                replace_client(bootstrap, f"after a stale leader epoch ({exc})", used)
                continue
            if stuck:
                replace_client(bootstrap, failed=used)
            raise
        with _LOCK:
            _FAILURES[bootstrap] = 0
        return result
    raise AssertionError("unreachable: the second attempt returns or raises")


def forget_clients() -> None:
    """Forget every AdminClient of this process (the next use makes a new one), destroying none
    (``_keep_forever``): ``stack down`` calls it before it stops the broker."""
    with _LOCK:
        for old in _CLIENTS.values():
            _keep_forever(old)
        _CLIENTS.clear()


def end_offsets(bootstrap: str, tps: set[tuple[str, int]] | list[tuple[str, int]],
                timeout_s: float = 10.0) -> dict[tuple[str, int], int]:
    """The end (high watermark) of each (topic, partition), from the process's AdminClient: a
    consumer's ``get_watermark_offsets`` called from another thread was seen blocking for
    minutes behind its own poll loop."""
    return _list_offsets(bootstrap, tps, OffsetSpec.latest(), timeout_s)


def start_offsets(bootstrap: str, tps: set[tuple[str, int]] | list[tuple[str, int]],
                  timeout_s: float = 10.0) -> dict[tuple[str, int], int]:
    """The first offset still in the log of each (topic, partition) (the low watermark)."""
    return _list_offsets(bootstrap, tps, OffsetSpec.earliest(), timeout_s)


def _list_offsets(bootstrap: str, tps: set[tuple[str, int]] | list[tuple[str, int]],
                  spec: OffsetSpec, timeout_s: float) -> dict[tuple[str, int], int]:
    if not tps:
        return {}
    request = {TopicPartition(t, p): spec for t, p in tps}

    def ask(admin: AdminClient) -> dict[tuple[str, int], int]:
        futures = admin.list_offsets(request, request_timeout=timeout_s)
        return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}

    return call(bootstrap, ask)


def topic_id(bootstrap: str, topic: str, timeout_s: float = 10.0) -> str:
    """The topic's id, which a topic deleted and created again under the same name does not
    keep: what a store checkpointed from one topic checks before it resumes from another."""

    def ask(admin: AdminClient) -> str:
        found = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout_s)
        return str(found[topic].result().topic_id)

    return call(bootstrap, ask)


def topic_config(bootstrap: str, topic: str, name: str, timeout_s: float = 10.0) -> str:
    """One config of a topic as the broker applies it (its own or the broker's default)."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)

    def ask(admin: AdminClient) -> str:
        found = admin.describe_configs([resource], request_timeout=timeout_s)[resource]
        return str(found.result()[name].value)

    return call(bootstrap, ask)


def set_topic_config(bootstrap: str, topic: str, name: str, value: str,
                     timeout_s: float = 10.0) -> None:
    """Set one config of a topic (an incremental alter: its other configs stay)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])

    def ask(admin: AdminClient) -> None:
        admin.incremental_alter_configs([resource], request_timeout=timeout_s)[resource].result()

    call(bootstrap, ask)


def align_retention(bootstrap: str, topics: tuple[TopicSpec, ...] = TOPICS) -> list[str]:
    """Set ``retention.ms`` of the delete-policy topics that exist with another than the
    topology's (made by an older version: ``cronstream.recipients`` was kept 7 days and is now
    kept until pruned); returns what it changed. ``stack up`` runs it; a deployment runs
    ``cronstream topics align`` once at an upgrade (docs/deploy.md), as a principal with
    AlterConfigs."""
    changed = []
    for topic in topics:
        if topic.compacted:
            continue
        try:
            current = int(topic_config(bootstrap, topic.name, "retention.ms"))
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise  # a broker gone is not "every topic as declared"
            continue  # not created yet: ensure_topics makes it as declared
        if current != topic.retention_ms:
            set_topic_config(bootstrap, topic.name, "retention.ms", str(topic.retention_ms))
            changed.append(f"{topic.name}: retention.ms {current} -> {topic.retention_ms}")
    return changed


def committed_offsets(bootstrap: str, group: str, timeout_s: float = 10.0
                      ) -> dict[tuple[str, int], int]:
    """What ``group`` has committed, per (topic, partition) it ever committed; partitions
    without a commit are absent. Read through the AdminClient, so it never joins the group."""

    def ask(admin: AdminClient) -> dict[tuple[str, int], int]:
        listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                   request_timeout=timeout_s)[group].result()
        return {(tp.topic, tp.partition): tp.offset for tp in listed.topic_partitions
                if tp.offset >= 0}

    return call(bootstrap, ask)


def ensure_topics(bootstrap: str, topics: tuple[TopicSpec, ...] | None = None,
                  timeout_s: float = 30.0, *, partitions: int) -> list[str]:
    """Create the missing topics, each of the cluster's ``partitions`` (``Settings.partitions``)
    unless it declares its own count; returns the names created. Raises if the broker refuses."""
    topics = topics if topics is not None else TOPICS + changelog_topics()
    admin = client(bootstrap)
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    wanted_replication = replication(bootstrap, timeout_s)
    wanted = [
        NewTopic(t.name, num_partitions=t.count(partitions),
                 replication_factor=wanted_replication.factor,
                 config={**t.configs(), **wanted_replication.topic_configs()})
        for t in topics
        if t.name not in existing
    ]
    if not wanted:
        return []
    created = []
    for name, future in admin.create_topics(wanted, request_timeout=timeout_s).items():
        try:
            future.result()
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    log.info("created topics %s", created)
    return created


def broker_count(bootstrap: str, timeout_s: float = 3.0) -> int:
    """How many brokers the cluster's metadata lists: the stack's health probe (asked from a
    child process, ``stack.isolated``)."""
    return len(client(bootstrap).list_topics(timeout=timeout_s).brokers)


class KafkaUnreachable(SystemExit):  # noqa: N818 - a process's exit, named for what it says
    """The process cannot use the cluster: the message names Kafka, the address, the way the
    client speaks to it and the cause (wrong credentials, an untrusted certificate, another
    protocol, no broker). A ``SystemExit``: a worker or the API stops at start with that line,
    instead of retrying for ever behind a hang. ``denied``: the broker answered and refused the
    client (its settings are to fix, waiting will not help); else nothing answered as a broker."""

    def __init__(self, reason: str, denied: bool = False) -> None:
        super().__init__(reason)
        self.denied = denied


# a TLS alert the broker sent about our certificate (OpenSSL's words: "tlsv1 alert unknown ca",
# "ssl/tls alert bad certificate", "tlsv13 alert certificate required", ...)
_CLIENT_CERT_ALERT = re.compile(r"alert (bad certificate|unknown ca|certificate \w+|"
                                r"unsupported certificate|access denied)")
# a client without TLS whose connection the broker closes at its first request (ApiVersion):
# the listener most likely expects TLS. A guess, so taken only once seen this often (a broker
# going away closes connections too)
_HELLO_CLOSED = re.compile(r"disconnected.*connection closed by peer.*state apiversion_query")
GUESS_AFTER = 5
WAITING_SAID_EVERY_S = 10.0


def where(bootstrap: str, security: KafkaSecurity) -> str:
    """What a client tried, as every line about Kafka begins: the address and the way in."""
    return f"kafka at {bootstrap} ({security.describe()})"


def diagnose(error: KafkaError | None, bootstrap: str,
             security: KafkaSecurity | None = None) -> str | None:
    """What a librdkafka error met while connecting says is wrong, in words naming the setting
    to check (``security``: the settings the client was made with, so the advice fits the way it
    authenticates); None when it is not a configuration problem (a broker still starting)."""
    if error is None:
        return None
    found = _cause(error.str(), error.code(), bootstrap, security or KafkaSecurity())
    return found[0] if found is not None and found[1] else None


def _cause(text: str, code: int | None, bootstrap: str, security: KafkaSecurity
           ) -> tuple[str, bool] | None:
    """The line ``text`` (an error or a log line of librdkafka's) means, and whether it is sure
    (False: a guess, ``GUESS_AFTER``); None when it says nothing about the settings."""
    lowered = text.lower()
    here = where(bootstrap, security)
    if "failed to acquire sasl oauthbearer token" in lowered:
        advice = _TOKEN_ADVICE.get(security.oauth_provider or "", "check "
                                   "CRONSTREAM_KAFKA_OAUTH_PROVIDER")
        return f"{here}: no OAUTHBEARER token ({advice}): {text}", True
    if "unsupported sasl mechanism" in lowered:
        return (f"{here}: the broker does not offer SASL {security.mechanism} on this listener "
                f"(check CRONSTREAM_KAFKA_SASL_MECHANISM and CRONSTREAM_BOOTSTRAP): {text}"), True
    if code in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED) \
            or "authentication failed" in lowered or "invalid credentials" in lowered \
            or "sasl authentication error" in lowered:
        if security.oauth:
            return (f"{here}: the broker refused the OAUTHBEARER token (check "
                    f"CRONSTREAM_KAFKA_OAUTH_PROVIDER, _SCOPE and what the cluster requires of a "
                    f"token): {text}"), True
        return (f"{here}: SASL authentication failed (check "
                f"CRONSTREAM_KAFKA_SASL_USERNAME/PASSWORD and _MECHANISM): {text}"), True
    if (alert := _CLIENT_CERT_ALERT.search(lowered)) is not None:
        if security.cert_file is None:
            return (f"{here}: TLS refused, the broker requires a client certificate (mutual "
                    f"TLS; set CRONSTREAM_KAFKA_CERT_FILE and _KEY_FILE): {text}"), True
        return (f"{here}: TLS refused, the broker does not accept the client certificate "
                f"({alert.group(0)}; check CRONSTREAM_KAFKA_CERT_FILE and _KEY_FILE: one "
                f"signed by a CA the broker trusts): {text}"), True
    if "connecting to a plaintext broker listener" in lowered:
        return (f"{here}: the listener does not speak TLS, it may be a PLAINTEXT one (check "
                f"CRONSTREAM_KAFKA_SECURITY_PROTOCOL and CRONSTREAM_BOOTSTRAP): {text}"), True
    if "certificate verify failed" in lowered or "ssl handshake failed" in lowered \
            or code == KafkaError._SSL:
        return (f"{here}: TLS handshake failed, the broker's certificate is not "
                f"trusted or does not name the host (check CRONSTREAM_KAFKA_CA_FILE): {text}"), True
    if "disconnected while requesting apiversion" in lowered:
        return (f"{here}: the broker closed the connection at once; it may expect "
                f"another protocol (CRONSTREAM_KAFKA_SECURITY_PROTOCOL): {text}"), True
    if not security.tls and _HELLO_CLOSED.search(lowered):
        return (f"{here}: the broker closed the connection at once; it may expect TLS, "
                f"SASL_SSL or SSL (check CRONSTREAM_KAFKA_SECURITY_PROTOCOL): {text}"), False
    return None


# what to check when no OAUTHBEARER token could be made, by provider
_TOKEN_ADVICE = {
    "oidc": "the token endpoint refused or did not answer: check CRONSTREAM_KAFKA_OAUTH_TOKEN_URL, "
            "_CLIENT_ID and _CLIENT_SECRET",
    "unsecured": "check CRONSTREAM_KAFKA_SASL_USERNAME, the token's subject",
    "aws-msk-iam": "check the AWS credentials and AWS_REGION",
}


# what librdkafka says when no broker can be there: no one listens, or no such host
_NOBODY_THERE = (("connection refused", "connection refused: nothing listens there (is the broker "
                  "up? on the local stack: cronstream stack status; else check "
                  "CRONSTREAM_BOOTSTRAP)"),
                 ("failed to resolve", "the host name does not resolve (check "
                  "CRONSTREAM_BOOTSTRAP)"))


def unreachable(texts: list[str], bootstrap: str, security: KafkaSecurity,
                waited_s: float) -> str:
    """Why no broker answered, from what librdkafka said meanwhile (``texts``, oldest first):
    the connection refused (nothing listens there), a host name that does not resolve, or
    silence until ``waited_s`` (a black hole: a firewall, a wrong address, a stopped host)."""
    here = where(bootstrap, security)
    for needle, cause in _NOBODY_THERE:
        said = [t for t in texts if needle in t.lower()]
        if said:
            return f"{here}: {cause}: {said[-1]}"
    last = texts[-1] if texts else "nothing said"
    return (f"{here}: timed out, no broker answered within {waited_s:.0f}s (check "
            f"CRONSTREAM_BOOTSTRAP, the network and that the broker is up): {last}")


_THREAD = re.compile(r"^\[thrd:[^\]]*\]: ")  # the thread a log line was written on


class _LogLines:
    """librdkafka's log lines of one client (its ``logger``: confluent-kafka calls ``log`` from
    ``poll``), kept to be read for their cause, and passed on to the ``librdkafka`` logger at
    debug level: a line a connection attempt, which the probe's own lines sum up (the CLI shows
    them with ``--verbose``)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.log_to = logging.getLogger("librdkafka")

    def log(self, _level: int, fmt: str, *args: object) -> None:
        text = _THREAD.sub("", str(args[-1])) if args else fmt
        self.lines.append(text)
        self.log_to.debug(fmt, *args)

    def take(self) -> list[str]:
        taken, self.lines = self.lines, []
        return taken


def check_reachable(bootstrap: str, timeout_s: float = 60.0, patient: bool = True) -> int:
    """Connect once before anything else and stop with a clear reason if it cannot work:
    without it, a wrong password or an untrusted CA showed only as metadata requests timing
    out. Returns the broker count. A configuration problem (``diagnose``) stops at its first
    sight; silence (no broker yet) is waited out for ``timeout_s``, and so is a refused
    connection unless not ``patient`` (the CLI: every broker refusing is its answer, now)."""
    errors: list[KafkaError] = []
    said = _LogLines()
    security = KafkaSecurity.from_env()
    # its log lines read here whatever the process's quiet setting (kafka_config)
    probe = AdminClient(client_config(bootstrap, **{"error_cb": errors.append, "logger": said,
                                                    "log_level": 6}))
    _keep_forever(probe)  # never destroyed, like every other (see there)
    started = time.monotonic()
    deadline, next_word = started + timeout_s, started + WAITING_SAID_EVERY_S
    texts: list[str] = []
    guesses: dict[str, int] = {}
    while True:
        try:
            return len(probe.list_topics(timeout=0.5).brokers)
        except KafkaException as exc:
            last = str(exc)
        probe.poll(0.2)  # serves error_cb and the logger
        round_ = [(e.code(), e.str()) for e in errors] + [(None, t) for t in said.take()]
        errors.clear()
        all_down = any(code == KafkaError._ALL_BROKERS_DOWN for code, _ in round_)
        for code, text in round_:
            found = _cause(text, code, bootstrap, security)
            if found is None:
                continue
            reason, sure = found
            cause = reason[:-len(text)]  # every line ends with librdkafka's words, which vary
            guesses[cause] = guesses.get(cause, 0) + 1
            if sure or guesses[cause] >= GUESS_AFTER:
                raise KafkaUnreachable(reason, denied=True)
        texts = (texts + [t for code, t in round_ if code != KafkaError._ALL_BROKERS_DOWN])[-50:]
        if not patient and all_down and any(needle in t.lower() for t in texts
                                             for needle, _ in _NOBODY_THERE):
            raise KafkaUnreachable(unreachable(texts, bootstrap, security, timeout_s))
        now = time.monotonic()
        if now > deadline:
            raise KafkaUnreachable(unreachable(texts or [last], bootstrap, security, timeout_s))
        if now > next_word:  # a process waiting at its start says why, now and then
            next_word = now + WAITING_SAID_EVERY_S
            log.info("%s: no broker answered yet, waiting up to %.0fs in all: %s",
                     where(bootstrap, security), timeout_s, texts[-1] if texts else last)


def group_session_problem(bootstrap: str, session_s: float, timeout_s: float = 10.0) -> str | None:
    """Why the brokers would refuse a consumer-group member with this session timeout (their
    ``group.min.session.timeout.ms``/``group.max.session.timeout.ms``), or None. Asked at a
    worker's start: refused, faust's consumer logs InvalidSessionTimeoutError and the worker
    dies with no word on the setting to change. A cluster that does not let the worker
    describe its brokers' configs (an ACL, a managed service) is not asked, and said so."""
    def ask(admin: AdminClient) -> tuple[int, int]:
        broker = next(iter(admin.list_topics(timeout=timeout_s).brokers))
        resource = ConfigResource(ConfigResource.Type.BROKER, str(broker))
        found = admin.describe_configs([resource], request_timeout=timeout_s)[resource].result()
        return (int(found["group.min.session.timeout.ms"].value),
                int(found["group.max.session.timeout.ms"].value))

    try:
        low, high = call(bootstrap, ask)
    except (KafkaException, KeyError, ValueError, StopIteration) as exc:
        log.warning("the brokers' group.min.session.timeout.ms could not be read (%s): a "
                    "session timeout below it makes the worker exit with "
                    "InvalidSessionTimeoutError (CRONSTREAM_GROUP_SESSION_TIMEOUT_S)", exc)
        return None
    session_ms = round(session_s * 1000)
    if low <= session_ms <= high:
        return None
    return (f"CRONSTREAM_GROUP_SESSION_TIMEOUT_S={session_s:g} is outside what the brokers at "
            f"{bootstrap} allow a consumer group's session (group.min.session.timeout.ms="
            f"{low}, group.max.session.timeout.ms={high}): set it within, or change the brokers' "
            "setting (docs/deploy.md, failover)")


def replication(bootstrap: str, timeout_s: float = 10.0) -> Replication:
    """The replication cronstream's topics get on this cluster (``kafka_config.replication_for``
    of its broker count and the settings)."""
    return replication_for(len(client(bootstrap).list_topics(timeout=timeout_s).brokers))


def replication_settings(bootstrap: str) -> tuple[int, int]:
    """``replication`` as a pair (factor, min.insync.replicas), for a child process's answer."""
    want = replication(bootstrap)
    return want.factor, want.min_insync


def replication_shortfall(bootstrap: str, timeout_s: float = 10.0) -> list[str]:
    """Every cronstream topic (its name starts with ``cronstream``: the topology's, the
    changelogs, faust's and Connect's) replicated below the setting: fewer replicas than the
    factor, or a lower ``min.insync.replicas``. Why reported, not fixed: raising a topic's
    factor moves its data between brokers (``kafka-reassign-partitions``), an operator's call;
    accepted silently, the topic would be the one whose broker's loss loses records."""
    want = replication(bootstrap, timeout_s)
    admin = client(bootstrap)
    topics = {name: meta for name, meta in admin.list_topics(timeout=timeout_s).topics.items()
              if name.startswith(APP_ID)}
    found: list[str] = []
    for name, meta in sorted(topics.items()):
        factor = min((len(p.replicas) for p in meta.partitions.values()), default=0)
        if factor < want.factor:
            found.append(f"{name}: replication factor {factor} < {want.factor}")
    if not topics:
        return found
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in sorted(topics)]
    for resource, future in admin.describe_configs(resources, request_timeout=timeout_s).items():
        min_isr = int(future.result()["min.insync.replicas"].value)
        if min_isr < want.min_insync:
            found.append(f"{resource.name}: min.insync.replicas {min_isr} < {want.min_insync}")
    return sorted(found)


def prepare_cluster(bootstrap: str, partitions: int) -> dict[str, object]:
    """What ``stack up`` asks of a running broker: the topology's topics (and Connect's), of
    ``partitions`` (``Settings.partitions``), and the workers' group seeded (``ensure_topics``,
    ``seed_group_offsets``); returns what each did."""
    created = ensure_topics(bootstrap, TOPICS + changelog_topics() + CONNECT_TOPICS,
                            partitions=partitions)
    return {"created": created, "aligned": align_retention(bootstrap),
            "seeded": seed_group_offsets(bootstrap, new_client_on_retry=True)}


RETRIABLE = (KafkaError._TIMED_OUT, KafkaError.COORDINATOR_NOT_AVAILABLE,
             KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR,
             KafkaError._TRANSPORT)


def agent_topics() -> tuple[str, ...]:
    return tuple(sorted({t.name for p in PROCESSORS if p.kind == "agent" for t in p.consumes}))


def group_topics(group: str) -> tuple[str, ...]:
    """The topics whose offsets ``group`` commits: the faust agents' for the workers' group, the
    fired topic for the executor's and the jobs topic for the scheduler's
    (``streams.runtime.partition_reader``)."""
    own = {EXECUTOR_GROUP: FIRED, JOBS_GROUP: JOBS}.get(group)
    return agent_topics() if own is None else (own.name,)


def seed_group_offsets(bootstrap: str, timeout_s: float = 120.0,
                       new_client_on_retry: bool = False) -> int:
    """``_seed_group_offsets`` of the workers' group, the executor's and the scheduler's jobs
    reader's, each retried while a
    new broker's group coordinator is still loading (the first request to a fresh cluster's
    ``__consumer_offsets`` times out).
    ``new_client_on_retry``: each retry on a client of its own, for a short-lived process
    (``prepare_cluster``): on a fresh three-broker cluster the same client asked again after
    that timeout aborted the process (librdkafka: `eonce->refcnt > 0`), every time."""
    deadline = time.monotonic() + timeout_s
    seeded = 0
    for group in (APP_ID, EXECUTOR_GROUP, JOBS_GROUP):
        while True:
            try:
                seeded += _seed_group_offsets(bootstrap, group)
                break
            except KafkaException as exc:
                if time.monotonic() > deadline:
                    raise
                log.info("group %s: coordinator not ready (%s); retrying", group, exc)
                if new_client_on_retry:
                    replace_client(bootstrap)
                time.sleep(2)
    return seeded


def _seed_group_offsets(bootstrap: str, group: str, timeout_s: float = 15.0) -> int:
    """Commit the log start for every partition the workers' group consumes but never committed.

    Why: a worker process that takes over a partition without a committed offset was seen to
    start at the partition's *end* (faust + aiokafka, despite ``auto_offset_reset=earliest``), so
    a fan-out order written before its first owner died was never delivered again and the
    campaign stalled. With a commit on every partition from the start, a new owner always
    resumes from the last acknowledged record. Only an empty group accepts this (Kafka refuses
    to move an active group's offsets), so ``stack up`` and each worker try it before joining;
    returns the partitions seeded.
    """
    # described first: librdkafka (2.16) crashes the process (SIGSEGV in rd_kafka_cgrp_op from
    # rd_kafka_handle_OffsetFetch) when a ListConsumerGroupOffsets answer carries an error from
    # a coordinator still loading __consumer_offsets, which every `stack up` of a broker with
    # data met; a describe reports that state as an ordinary error (retried by the caller)
    call(bootstrap, lambda admin: admin.describe_consumer_groups(
        [group], request_timeout=timeout_s)[group].result())
    committed = committed_offsets(bootstrap, group, timeout_s)
    admin = client(bootstrap)
    metadata = admin.list_topics(timeout=timeout_s).topics
    missing = [TopicPartition(name, p) for name in group_topics(group) if name in metadata
               for p in metadata[name].partitions if (name, p) not in committed]
    if not missing:
        return 0
    # the readers' groups start where the workers' group left their topic when it was read
    # through faust (an upgrade), else at the log start like every other
    inherited = committed_offsets(bootstrap, APP_ID, timeout_s) if group != APP_ID else {}
    fresh = [tp for tp in missing if (tp.topic, tp.partition) not in inherited]
    starts = admin.list_offsets({tp: OffsetSpec.earliest() for tp in fresh},
                                request_timeout=timeout_s) if fresh else {}
    offsets = [TopicPartition(tp.topic, tp.partition, f.result().offset) for tp, f in starts.items()]
    offsets += [TopicPartition(tp.topic, tp.partition, inherited[(tp.topic, tp.partition)])
                for tp in missing if (tp.topic, tp.partition) in inherited]
    try:
        done = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, offsets)],
                                                  request_timeout=timeout_s)[group].result()
        # errors per partition come back on a "successful" result
        errors = [tp.error for tp in done.topic_partitions if tp.error is not None]
        if errors:
            raise KafkaException(errors[0])
    except KafkaException as exc:
        if exc.args[0].code() in RETRIABLE:
            raise
        # an active group: Kafka refuses, and its members hold these partitions already
        log.info("group %s: %d partitions without a commit left to their owners (%s)", group,
                 len(offsets), exc)
        return 0
    log.info("group %s: committed a start for %d partitions (%d inherited from group %s)", group,
             len(offsets), len(offsets) - len(fresh), APP_ID)
    return len(offsets)
