"""Runtime settings, read from the environment, shared by the stack, the workers and the API.

Every endpoint, credential, bind address, port and path is a ``CRONSTREAM_*`` variable (the
table ``SETTINGS`` lists them all; docs/deploy.md prints it). The defaults let a newcomer run
everything on one machine; a deployment sets what it needs, e.g. ``CRONSTREAM_PG_DSN`` and
``CRONSTREAM_API_URL``. A secret (``SECRETS``) may also come from a file, ``NAME_FILE``: what
container platforms and systemd's credentials hand a process. ``validate`` checks every setting
at a process's start and names the variable of each problem, one line each; ``cronstream config
check`` prints the effective configuration with the secrets masked.

This module is the only reader of the environment (``tests/unit/test_settings_once.py`` fails
on any other): a process calls ``load`` (or ``check_or_exit``) once at its start and hands the
``Settings``, or the values it needs of them, to what it builds; nothing reads a variable at
import, and no module keeps a global a process sets when it wires itself. A setting that
changes while the process runs (a secret rotated by a test) is seen by the next read of the
property, as before: the properties read the environment, no one else does.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO_ROOT = Path(__file__).resolve().parents[2]
# How long the API may take to catch its views up when it starts: a first start (or a wiped
# store) reads and indexes the whole jobs topic, ~12,000 jobs a second on the 2-core box
# (``bench.console --jobs``: 10M in about 14 minutes), twice that allowed for a slower machine.
# Whatever starts the API waits this long for its health, not the 60 s of the other components.
API_START_S = 1800


# the secrets: each may be given as NAME or as NAME_FILE (a file holding it)
SECRETS = ("CRONSTREAM_PG_PASSWORD", "CRONSTREAM_KAFKA_SASL_PASSWORD",
           "CRONSTREAM_KAFKA_SSL_KEY_PASSWORD", "CRONSTREAM_KAFKA_OAUTH_CLIENT_SECRET",
           "CRONSTREAM_UNSUBSCRIBE_SECRET", "CRONSTREAM_OPERATOR_KEY", "CRONSTREAM_SINK_PG_PASSWORD",
           "AWS_SECRET_ACCESS_KEY", "CRONSTREAM_API_KEY")
REGION_NAME = re.compile(r"[a-z0-9-]{1,32}")
PG_SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


class SettingsError(SystemExit):
    """A setting that cannot work: one line naming the variable and the problem, as a
    ``SystemExit`` so a process stops at start with it, not with a traceback."""


def resolve_secret_files(env: MutableMapping[str, str] | None = None) -> None:
    """Read each ``NAME_FILE`` of ``SECRETS`` into ``NAME`` (once; every reader of the
    environment then sees the secret, Kafka's clients and the API's operator check alike).
    Both set, or a file that cannot be read, stops the process naming the variable."""
    env = os.environ if env is None else env
    for name in SECRETS:
        path = env.get(f"{name}_FILE")
        if not path:
            continue
        try:
            value = Path(path).read_text().strip()
        except OSError as exc:
            raise SettingsError(f"{name}_FILE={path!r}: cannot be read ({exc.strerror})") from exc
        if env.get(name) and env[name] != value:
            raise SettingsError(f"{name} and {name}_FILE are both set: set one")
        env[name] = value


def environment() -> Mapping[str, str]:
    """The process's environment, for what interprets a whole mapping of it
    (``kafka_config``'s security and replication settings, which also take another mapping: a
    second stack's clients) and for the stack's forwarding of a variable as set. The one place
    ``os.environ`` is read."""
    return os.environ


def export(values: Mapping[str, str], *, override: bool = False) -> list[str]:
    """Put ``values`` in this process's environment, for its later reads of the settings and
    for the processes it starts (the CLI adopts a secure home's Kafka settings; a benchmark
    takes its stack's); without ``override`` a variable already set wins. Returns the names
    set."""
    chosen = {k: v for k, v in values.items() if override or k not in os.environ}
    os.environ.update(chosen)
    return sorted(chosen)


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise SettingsError(f"{name}={raw!r} is not an integer") from exc


def _int_at_least(name: str, default: int, minimum: int) -> int:
    """``_int``, refused below ``minimum`` with a line naming the variable."""
    value = _int(name, default)
    if value < minimum:
        raise SettingsError(f"{name}={value} is not >= {minimum}")
    return value


def _float(name: str, default: str) -> float:
    raw = os.environ.get(name) or default
    try:
        return float(raw)
    except ValueError as exc:
        raise SettingsError(f"{name}={raw!r} is not a number") from exc


@dataclass(frozen=True)
class Settings:
    home: Path
    kafka_port: int
    controller_port: int
    connect_port: int
    pg_port: int
    api_port: int
    worker_web_port: int
    worker_metrics_port: int
    ses_port: int
    # the address the local stack's services listen on, and every default endpoint names
    # (CRONSTREAM_STACK_HOST): another than loopback runs them as on another host
    host: str = "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        """``CRONSTREAM_BOOTSTRAP``, else every broker of the local stack: the list ``stack up
        --brokers N`` recorded in its home (``stack.local.record_brokers``), else the one."""
        if os.environ.get("CRONSTREAM_BOOTSTRAP"):
            return os.environ["CRONSTREAM_BOOTSTRAP"]
        try:
            listed = (self.home / "kafka" / "bootstrap").read_text().strip()
        except OSError:
            listed = ""
        return listed or f"{self.host}:{self.kafka_port}"

    # -- PostgreSQL ------------------------------------------------------------------------------
    @property
    def pg_params(self) -> dict[str, str]:
        """The connection's parameters: ``CRONSTREAM_PG_DSN`` (a libpq key=value string or
        ``postgresql://`` URI) if set, else ``CRONSTREAM_PG_HOST``, ``_PORT``, ``_DATABASE``,
        ``_USER``; ``CRONSTREAM_PG_PASSWORD``, ``_SSLMODE`` and ``_SSLROOTCERT`` add to either
        (a password or sslmode in the DSN wins)."""
        from psycopg import conninfo

        raw = os.environ.get("CRONSTREAM_PG_DSN")
        if raw:
            try:
                params = {k: str(v) for k, v in conninfo.conninfo_to_dict(raw).items()}
            except Exception as exc:  # noqa: BLE001 - psycopg's ProgrammingError, said in a line
                raise SettingsError(f"CRONSTREAM_PG_DSN is not a PostgreSQL connection string: "
                                    f"{str(exc).splitlines()[0]}") from exc
        else:
            params = {"host": os.environ.get("CRONSTREAM_PG_HOST") or self.host,
                      "port": str(self.pg_port),
                      "dbname": os.environ.get("CRONSTREAM_PG_DATABASE") or "cronstream",
                      "user": os.environ.get("CRONSTREAM_PG_USER") or "cronstream"}
        for name, key in (("CRONSTREAM_PG_PASSWORD", "password"),
                          ("CRONSTREAM_PG_SSLMODE", "sslmode"),
                          ("CRONSTREAM_PG_SSLROOTCERT", "sslrootcert")):
            if os.environ.get(name) and key not in params:
                params[key] = os.environ[name]
        mode = params.get("sslmode", "prefer")
        if mode not in PG_SSLMODES:
            raise SettingsError(f"CRONSTREAM_PG_SSLMODE={mode!r} is not one of "
                                f"{', '.join(PG_SSLMODES)}")
        if params.get("sslrootcert") and not os.path.isfile(params["sslrootcert"]):
            raise SettingsError(f"CRONSTREAM_PG_SSLROOTCERT={params['sslrootcert']!r}: no such file")
        return params

    @property
    def pg_dsn(self) -> str:
        """What psycopg connects with (the API's reads of the sinks' tables, ``stack``)."""
        from psycopg import conninfo

        return conninfo.make_conninfo(**self.pg_params)

    @property
    def pg_jdbc_url(self) -> str:
        """The same database as the JDBC sinks reach it: ``CRONSTREAM_SINK_PG_URL`` when Kafka
        Connect sees it at another address, else made from ``pg_params`` (host, port, database,
        sslmode and its root certificate, a path on the Connect worker's disk)."""
        if os.environ.get("CRONSTREAM_SINK_PG_URL"):
            return os.environ["CRONSTREAM_SINK_PG_URL"]
        p = self.pg_params
        host = p.get("host") or "127.0.0.1"
        host = f"[{host}]" if ":" in host else host
        # reWriteBatchedInserts: the driver sends a sink's batch of upserts as multi-row
        # INSERT ... ON CONFLICT statements rather than one statement per row (the sinks'
        # batch.size, connectors/*.json); the ledger and feedback sinks turn it off again
        # (stack.local.sink_specs; why: connectors/ledger.sql's header)
        query = "&".join([*(f"{key}={p[key]}" for key in ("sslmode", "sslrootcert") if p.get(key)),
                          "reWriteBatchedInserts=true"])
        return f"jdbc:postgresql://{host}:{p.get('port') or 5432}/{p.get('dbname') or 'cronstream'}" \
            f"?{query}"

    @property
    def sink_pg_password(self) -> str:
        """The password the sinks' configs carry: ``CRONSTREAM_SINK_PG_PASSWORD`` (e.g. a Kafka
        Connect config provider's reference, ``${file:/etc/connect/pg.properties:password}``),
        else the PostgreSQL password; the local stack's trust auth takes any (Debezium insists)."""
        return (os.environ.get("CRONSTREAM_SINK_PG_PASSWORD") or self.pg_params.get("password")
                or "local-trust-auth")

    # -- URLs and bind addresses ------------------------------------------------------------------
    @property
    def api_url(self) -> str:
        """The API's URL as its users reach it (``CRONSTREAM_API_URL``): the CLI's default, and
        the base of every campaign email's ``List-Unsubscribe`` link, so in production the
        public https URL of the load balancer in front of the API."""
        return os.environ.get("CRONSTREAM_API_URL") or f"http://{self.host}:{self.api_port}"

    @property
    def api_host(self) -> str:
        """The API's bind address (``CRONSTREAM_API_HOST``; 0.0.0.0 behind a load balancer)."""
        return os.environ.get("CRONSTREAM_API_HOST") or "127.0.0.1"

    @property
    def worker_metrics_host(self) -> str:
        """A worker's ``/metrics``, ``/healthz`` and ``/readyz`` bind address
        (``CRONSTREAM_WORKER_METRICS_HOST``; 0.0.0.0 for a Prometheus on another host)."""
        return os.environ.get("CRONSTREAM_WORKER_METRICS_HOST") or "127.0.0.1"

    @property
    def connect_url(self) -> str:
        """Kafka Connect's REST URL (``CRONSTREAM_CONNECT_URL``): ``sink register`` and
        ``stack`` talk to it."""
        return os.environ.get("CRONSTREAM_CONNECT_URL") or f"http://{self.host}:{self.connect_port}"

    @property
    def recipients_prune_interval_s(self) -> int:
        """How often the API deletes from cronstream.recipients what no campaign can read any
        more (``CRONSTREAM_RECIPIENTS_PRUNE_INTERVAL_S``, 3600; 0 never:
        ``streams.campaigns.retention``)."""
        return _int_at_least("CRONSTREAM_RECIPIENTS_PRUNE_INTERVAL_S", 3600, 0)

    @property
    def local_ses_endpoint(self) -> str:
        """The local stack's own SES-compatible server (``stack/ses_server.py``)."""
        return f"http://{self.host}:{self.ses_port}"

    @property
    def ses_endpoint(self) -> str:
        """Where the workers send mail: ``CRONSTREAM_SES_ENDPOINT``, else the local server."""
        return os.environ.get("CRONSTREAM_SES_ENDPOINT") or self.local_ses_endpoint

    @property
    def ses_is_local(self) -> bool:
        """Whether the workers send to the local stack's server (so ``stack up`` runs it)."""
        return self.ses_endpoint.rstrip("/") == self.local_ses_endpoint

    @property
    def local_sms_endpoint(self) -> str:
        """The local stack's own End User Messaging SMS server: under ``/sms`` of its SES
        server's address (``stack/messaging_server.py``: one process, one port)."""
        return f"{self.local_ses_endpoint}/sms"

    @property
    def sms_endpoint(self) -> str:
        """Where the workers send texts: ``CRONSTREAM_SMS_ENDPOINT``, else the local server."""
        return os.environ.get("CRONSTREAM_SMS_ENDPOINT") or self.local_sms_endpoint

    @property
    def ses_max_rate_per_s(self) -> float:
        """The SES account's sending rate (``CRONSTREAM_SES_MAX_RATE``), shared by its tenants."""
        raw = os.environ.get("CRONSTREAM_SES_MAX_RATE") or "20000"
        try:
            return float(raw)
        except ValueError as exc:
            raise SystemExit(f"CRONSTREAM_SES_MAX_RATE={raw!r} is not a number") from exc

    @property
    def runs_per_host(self) -> int:
        """Calls in flight to one webhook host per worker (``CRONSTREAM_RUNS_PER_HOST``): a
        slow target holds at most this many of a worker's runs (``streams.execution.dispatch``)."""
        raw = os.environ.get("CRONSTREAM_RUNS_PER_HOST") or "128"  # half the executor's 256
        if not raw.isdigit() or int(raw) < 1:
            raise SystemExit(f"CRONSTREAM_RUNS_PER_HOST={raw!r} is not a whole number >= 1")
        return int(raw)

    @property
    def event_loop(self) -> str:
        """The workers' event loop (``CRONSTREAM_EVENT_LOOP``): ``uvloop`` (the default; libuv's
        loop spent less of a draining worker's CPU per run than asyncio's, docs/performance.md)
        or ``asyncio``."""
        raw = os.environ.get("CRONSTREAM_EVENT_LOOP") or "uvloop"
        if raw not in ("uvloop", "asyncio"):
            raise SettingsError(f"CRONSTREAM_EVENT_LOOP={raw!r} is not uvloop or asyncio")
        return raw

    @property
    def dns_timeout_s(self) -> float:
        """How long a webhook host's name may take to resolve (``CRONSTREAM_DNS_TIMEOUT_S``,
        default 2), in the API's check and at each call: then the create is a 422 and the
        attempt a retryable failure (``streams.adapters.dns``), and no one else waits on it."""
        seconds = _float("CRONSTREAM_DNS_TIMEOUT_S", "2")
        if not 0 < seconds <= 60:
            raise SettingsError(f"CRONSTREAM_DNS_TIMEOUT_S={seconds:g} is not in (0, 60]")
        return seconds

    @property
    def group_session(self) -> tuple[float, float]:
        """The workers' consumer-group session timeout and heartbeat interval, in seconds
        (``CRONSTREAM_GROUP_SESSION_TIMEOUT_S`` 2, ``CRONSTREAM_GROUP_HEARTBEAT_S`` 0.5). A
        worker that dies is noticed by the group coordinator when its session ends, so this is
        the floor of a failover (``bench.failover``). Heartbeats are sent by faust's consumer
        thread, not the worker's event loop, so a busy loop does not miss them. The brokers'
        ``group.min.session.timeout.ms`` must allow it (the local stack sets 1000; Kafka's
        default 6000 refuses the join with INVALID_SESSION_TIMEOUT: docs/deploy.md)."""
        session = _float("CRONSTREAM_GROUP_SESSION_TIMEOUT_S", "2")
        heartbeat = _float("CRONSTREAM_GROUP_HEARTBEAT_S", "0.5")
        if not 1 <= session <= 300:
            raise SettingsError(f"CRONSTREAM_GROUP_SESSION_TIMEOUT_S={session:g} is not in "
                                "[1, 300]")
        if not 0 < heartbeat <= session / 3:
            raise SettingsError(f"CRONSTREAM_GROUP_HEARTBEAT_S={heartbeat:g} is not in (0, "
                                f"{session / 3:g}]: at most a third of the session timeout, so "
                                "one lost heartbeat does not end the session")
        return session, heartbeat

    @property
    def reconciler_lag_s(self) -> float:
        """How long after a slot was sent to run the reconciler waits for its decision before it
        re-drives the slot under the same fire id (``CRONSTREAM_RECONCILER_LAG_S``, 120:
        ``streams.scheduling.reconciler``). Shorter catches a lost run sooner; too short re-drives
        slots that are only queued behind a burst (the reconciler leaves those alone while the
        executor has records to take up, and the done table keeps a re-drive from running a
        slot twice, so a short lag costs work, never a second call)."""
        seconds = _float("CRONSTREAM_RECONCILER_LAG_S", "120")
        if not 5 <= seconds <= 3600:
            raise SettingsError(f"CRONSTREAM_RECONCILER_LAG_S={seconds:g} is not in [5, 3600]")
        return seconds

    @property
    def soft_bounce_limit(self) -> int:
        """Transient bounces of an address, within the window, that suppress it
        (``CRONSTREAM_SOFT_BOUNCE_LIMIT``, default 3: ``streams.campaigns.bounces``)."""
        limit = _int("CRONSTREAM_SOFT_BOUNCE_LIMIT", 3)
        if limit < 1:
            raise SystemExit(f"CRONSTREAM_SOFT_BOUNCE_LIMIT={limit} is not >= 1")
        return limit

    @property
    def soft_bounce_window_days(self) -> int:
        """The window those soft bounces fall within (``CRONSTREAM_SOFT_BOUNCE_WINDOW_DAYS``, 7)."""
        days = _int("CRONSTREAM_SOFT_BOUNCE_WINDOW_DAYS", 7)
        if days < 1:
            raise SystemExit(f"CRONSTREAM_SOFT_BOUNCE_WINDOW_DAYS={days} is not >= 1")
        return days

    @property
    def unknown_window_s(self) -> int:
        """How long after a recipient was recorded ``unknown`` an SES event of its message still
        resolves it to sent (``CRONSTREAM_UNKNOWN_WINDOW_S``, 86400: SES publishes a Send event
        within seconds, a Delivery within minutes, and retries a delayed one for up to about
        14 hours); after it, the recipient stays unknown and is listed as unresolved."""
        seconds = _int("CRONSTREAM_UNKNOWN_WINDOW_S", 86400)
        if seconds < 1:
            raise SystemExit(f"CRONSTREAM_UNKNOWN_WINDOW_S={seconds} is not >= 1")
        return seconds

    @property
    def guard_thresholds(self) -> tuple[float, float, int, int]:
        """The reputation guard's bounce rate, complaint rate, minimum sends and window in
        seconds (``CRONSTREAM_GUARD_BOUNCE_RATE`` 0.04, ``..._COMPLAINT_RATE`` 0.0008, below
        SES's review levels of about 5 % and 0.1 %; ``..._MIN_SENDS`` 1000 per partition,
        ``..._WINDOW_S`` 86400: ``streams.campaigns.reputation``)."""
        rates = []
        for name, default in (("CRONSTREAM_GUARD_BOUNCE_RATE", "0.04"),
                              ("CRONSTREAM_GUARD_COMPLAINT_RATE", "0.0008")):
            rate = _float(name, default)
            if not 0 < rate <= 1:
                raise SystemExit(f"{name}={rate:g} is not a rate in (0, 1]")
            rates.append(rate)
        min_sends = _int("CRONSTREAM_GUARD_MIN_SENDS", 1000)
        window_s = _int("CRONSTREAM_GUARD_WINDOW_S", 86400)
        if min_sends < 1 or window_s < 1:
            raise SystemExit("CRONSTREAM_GUARD_MIN_SENDS and CRONSTREAM_GUARD_WINDOW_S must be >= 1")
        return rates[0], rates[1], min_sends, window_s

    @property
    def sns_topics(self) -> dict[str, str | None]:
        """SNS topics whose messages the feedback endpoint accepts (``CRONSTREAM_SNS_TOPICS``,
        separated by commas or spaces): ``ARN=TENANT`` pins a topic to a tenant, a bare ``ARN``
        leaves the tenant to each event's configuration set (``streams.campaigns.ses_events``)."""
        topics: dict[str, str | None] = {}
        for entry in (os.environ.get("CRONSTREAM_SNS_TOPICS") or "").replace(",", " ").split():
            arn, _, tenant = entry.partition("=")
            if not arn.startswith("arn:"):
                raise SystemExit(f"CRONSTREAM_SNS_TOPICS: {arn!r} is not a topic ARN")
            topics[arn] = tenant or None
        return topics

    @property
    def sns_cert_hosts(self) -> tuple[str, ...]:
        """Regexes (separated by spaces) a SigningCertURL's or SubscribeURL's ``host[:port]``
        must match in full (``CRONSTREAM_SNS_CERT_HOSTS``); none set means AWS's SNS hosts
        (``streams.adapters.sns.DEFAULT_CERT_HOSTS``)."""
        return tuple((os.environ.get("CRONSTREAM_SNS_CERT_HOSTS") or "").split())

    @property
    def sns_allow_http(self) -> bool:
        """Plain-http certificate and subscribe URLs (``CRONSTREAM_SNS_ALLOW_HTTP=1``): the local
        stack's SES server only; AWS's are https."""
        return os.environ.get("CRONSTREAM_SNS_ALLOW_HTTP", "") in ("1", "true", "yes")

    @property
    def sns_allow_signature_v1(self) -> bool:
        """SNS messages signed with SignatureVersion 1, SHA1 (``CRONSTREAM_SNS_ALLOW_SIGNATURE_V1
        =1``): refused by default; a topic signs with 2 once its SignatureVersion says so."""
        return os.environ.get("CRONSTREAM_SNS_ALLOW_SIGNATURE_V1", "") in ("1", "true", "yes")

    @property
    def sns_max_age_s(self) -> float:
        """How old an SNS message may be (``CRONSTREAM_SNS_MAX_AGE_S``): SNS retries an HTTP(S)
        delivery for at most an hour, so the default 3,900 s refuses only replays."""
        raw = os.environ.get("CRONSTREAM_SNS_MAX_AGE_S") or "3900"
        try:
            return float(raw)
        except ValueError as exc:
            raise SystemExit(f"CRONSTREAM_SNS_MAX_AGE_S={raw!r} is not a number") from exc

    # -- regions (docs/regions.md) ------------------------------------------------------------------
    @property
    def region(self) -> str | None:
        """This process's region (``CRONSTREAM_REGION``): set, its sends need the region's lease
        from the authority; unset, one region and no authority (``streams.runtime.authority``)."""
        name = os.environ.get("CRONSTREAM_REGION") or None
        if name is not None and not REGION_NAME.fullmatch(name):
            raise SettingsError(f"CRONSTREAM_REGION={name!r} is not 1 to 32 lower-case letters, "
                                "digits or '-'")
        return name

    @property
    def authority_dsn(self) -> str:
        """Where the active-region authority's row lives (``CRONSTREAM_AUTHORITY_DSN``): a store
        every region reaches; by default the PostgreSQL of record (``CRONSTREAM_PG_*``)."""
        return os.environ.get("CRONSTREAM_AUTHORITY_DSN") or self.pg_dsn

    @property
    def standby_bootstrap(self) -> str:
        """The other region's brokers (``CRONSTREAM_STANDBY_BOOTSTRAP``), where MirrorMaker 2
        records how far it copied: the API's replication-lag gauges and ``lag`` read them."""
        return os.environ.get("CRONSTREAM_STANDBY_BOOTSTRAP") or ""

    @property
    def region_lease(self) -> tuple[float, float, float]:
        """The lease, the margin a worker stops before its end, and the renewal period, in
        seconds (``CRONSTREAM_REGION_LEASE_S`` 10, ``..._MARGIN_S`` 2, ``..._RENEW_S`` 2)."""
        lease = _float("CRONSTREAM_REGION_LEASE_S", "10")
        margin = _float("CRONSTREAM_REGION_MARGIN_S", "2")
        renew = _float("CRONSTREAM_REGION_RENEW_S", "2")
        if not 0 < margin < lease or not 0 < renew < lease - margin:
            raise SettingsError(f"CRONSTREAM_REGION_LEASE_S={lease:g}, _MARGIN_S={margin:g}, "
                                f"_RENEW_S={renew:g}: need 0 < margin < lease and 0 < renew < "
                                "lease - margin (a worker renews before it must stop)")
        return lease, margin, renew

    @property
    def region_reserve_chunks(self) -> int:
        """How many of a recipient partition's chunks a walker reserves ahead in the authority
        (``CRONSTREAM_REGION_RESERVE_CHUNKS``, 8): fewer, less a deposed region may have left
        unknown; more, fewer writes to the authority (docs/regions.md, reservations)."""
        chunks = _int("CRONSTREAM_REGION_RESERVE_CHUNKS", 8)
        if chunks < 2:
            raise SettingsError(f"CRONSTREAM_REGION_RESERVE_CHUNKS={chunks}: need at least 2 "
                                "(a reservation is extended once half of it is left)")
        return chunks

    # -- the worker, the API, the CLI and the stack: read here, handed down ----------------------
    def given(self, name: str) -> str | None:
        """The variable ``name`` as set (None: unset or empty), for the stack that forwards a
        setting to its processes as given and fills in its own local default otherwise."""
        return os.environ.get(name) or None

    @property
    def worker_id(self) -> str:
        """A worker's stable id (``CRONSTREAM_WORKER_ID``, set by ``stack up``), else host and
        pid: its state directory and its group client id."""
        return os.environ.get("CRONSTREAM_WORKER_ID") or f"{socket.gethostname()}-{os.getpid()}"

    @property
    def partitions(self) -> int:
        """Partitions of the job-keyed topics (``CRONSTREAM_PARTITIONS``, 8); fixed for the life
        of a cluster (keys hash to it): ``streams.topology`` takes it as a parameter."""
        from streams.topology import DEFAULT_PARTITIONS

        return _int_at_least("CRONSTREAM_PARTITIONS", DEFAULT_PARTITIONS, 1)

    @property
    def standby_replicas(self) -> int:
        """Standby replicas of the standby tables every worker keeps
        (``CRONSTREAM_STANDBY_REPLICAS``, 1; 0 turns them off: ``streams.runtime.app``)."""
        return _int_at_least("CRONSTREAM_STANDBY_REPLICAS", 1, 0)

    @property
    def ses_endpoint_url(self) -> str | None:
        """Where boto3 sends mail: ``CRONSTREAM_SES_ENDPOINT``, None for AWS SES itself (the
        workers' and the CLI's SES client, ``streams.adapters.ses.client``)."""
        return os.environ.get("CRONSTREAM_SES_ENDPOINT") or None

    @property
    def sms_endpoint_url(self) -> str | None:
        """Where boto3 sends text messages: ``CRONSTREAM_SMS_ENDPOINT``, a server of AWS End User
        Messaging SMS's API (``stack/sms_server.py`` locally); None for AWS itself
        (``streams.adapters.sms.client``)."""
        return os.environ.get("CRONSTREAM_SMS_ENDPOINT") or None

    @property
    def aws_region(self) -> str:
        """SES's and SMS's region (``AWS_REGION``, us-east-1). The credentials stay boto3's to
        read."""
        return os.environ.get("AWS_REGION") or "us-east-1"

    @property
    def unsubscribe_secret(self) -> str:
        """What signs the one-click unsubscribe tokens (``CRONSTREAM_UNSUBSCRIBE_SECRET``, at
        least 16 characters: ``validate`` says so at start; ``streams.campaigns.unsubscribe``)."""
        return os.environ.get("CRONSTREAM_UNSUBSCRIBE_SECRET") or ""

    @property
    def operator_key(self) -> str | None:
        """The operator key of ``/v1/ops`` and the console (``CRONSTREAM_OPERATOR_KEY``; None:
        the operator surface is off). Read at each check, so a rotated key takes at once."""
        return os.environ.get("CRONSTREAM_OPERATOR_KEY") or None

    @property
    def console_worker_metrics(self) -> tuple[str, ...]:
        """The workers' ``/metrics`` URLs the console reads (``CRONSTREAM_CONSOLE_WORKER_METRICS``,
        separated by commas); none: the local stack's (``api.console.operator``)."""
        listed = os.environ.get("CRONSTREAM_CONSOLE_WORKER_METRICS") or ""
        return tuple(u.strip() for u in listed.split(",") if u.strip())

    @property
    def api_key(self) -> str | None:
        """The CLI's tenant API key (``CRONSTREAM_API_KEY``) when ``--api-key`` is not given."""
        return os.environ.get("CRONSTREAM_API_KEY") or None

    @property
    def brokers(self) -> int | None:
        """``stack up``'s broker count (``CRONSTREAM_BROKERS``) when ``--brokers`` is not given."""
        raw = os.environ.get("CRONSTREAM_BROKERS")
        if not raw:
            return None
        return _int_at_least("CRONSTREAM_BROKERS", 1, 1)

    @property
    def standby_port_offset(self) -> int:
        """How far above region a's ports a local region b listens
        (``CRONSTREAM_STANDBY_PORT_OFFSET``, 1000: ``stack.two_regions``)."""
        return _int_at_least("CRONSTREAM_STANDBY_PORT_OFFSET", 1000, 1)

    @property
    def ses_log(self) -> Path:
        """Where the local SES server writes what it was sent (``CRONSTREAM_SES_LOG``; the stack
        sets it to its home's ``ses/sent.jsonl``)."""
        return Path(os.environ.get("CRONSTREAM_SES_LOG") or "ses-sent.jsonl")

    @property
    def sms_log(self) -> Path:
        """Where the local SMS server writes what it was sent (``CRONSTREAM_SMS_LOG``), its
        inbound texts' deliveries beside it (``inbound.jsonl``): the fault checker's record."""
        return Path(os.environ.get("CRONSTREAM_SMS_LOG") or "sms-sent.jsonl")

    @property
    def kafka_security(self) -> Any:
        """The Kafka clients' TLS/SASL/OAUTHBEARER settings (``CRONSTREAM_KAFKA_*``), checked:
        a ``kafka_config.KafkaSecurity``."""
        from streams.runtime import kafka_config

        return kafka_config.KafkaSecurity.from_env(environment())

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"


def load() -> Settings:
    resolve_secret_files()
    home = Path(os.environ.get("CRONSTREAM_HOME") or REPO_ROOT / ".local").resolve()
    return Settings(
        home=home,
        kafka_port=_int("CRONSTREAM_KAFKA_PORT", 19092),
        controller_port=_int("CRONSTREAM_CONTROLLER_PORT", 19093),
        connect_port=_int("CRONSTREAM_CONNECT_PORT", 18083),
        pg_port=_int("CRONSTREAM_PG_PORT", 15432),
        api_port=_int("CRONSTREAM_API_PORT", 18080),
        worker_web_port=_int("CRONSTREAM_WORKER_WEB_PORT", 16066),
        worker_metrics_port=_int("CRONSTREAM_WORKER_METRICS_PORT", 16166),
        ses_port=_int("CRONSTREAM_SES_PORT", 18025),
        host=os.environ.get("CRONSTREAM_STACK_HOST") or "127.0.0.1",
    )


# -- the table of settings, their check and their print-out -----------------------------------------
@dataclass(frozen=True)
class Setting:
    """One variable: its documented default, what it does, who reads it, and how to read its
    effective value from ``Settings`` (None: the variable as set)."""

    name: str
    default: str
    doc: str
    used_by: str = "worker, API"
    value: Callable[[Settings], object] | None = None
    secret: bool = False


def _kafka_env(name: str) -> Callable[[Settings], object]:
    return lambda s: s.given(name) or ""


SETTINGS: tuple[Setting, ...] = (
    Setting("CRONSTREAM_STACK_HOST", "`127.0.0.1`", "the local stack only: the address its "
            "services listen on, and the host of every default endpoint below", "`stack`",
            lambda s: s.host),
    Setting("CRONSTREAM_HOME", "`.local/` of the checkout", "state: a worker's RocksDB tables "
            "(`workers/<id>`), the API's view stores (`api/`); a persistent volume per process",
            "worker, API, CLI", lambda s: s.home),
    Setting("CRONSTREAM_WORKER_ID", "host name and pid", "a worker's stable id: its state "
            "directory and its group client id; set one per worker and keep it across restarts",
            "worker", lambda s: s.given("CRONSTREAM_WORKER_ID") or ""),
    Setting("CRONSTREAM_BOOTSTRAP", "the local stack's brokers", "Kafka bootstrap servers, "
            "`host:port,host:port`", "worker, API, CLI", lambda s: s.bootstrap),
    Setting("CRONSTREAM_KAFKA_SECURITY_PROTOCOL", "`PLAINTEXT`", "`PLAINTEXT`, `SSL`, "
            "`SASL_PLAINTEXT` or `SASL_SSL`", "worker, API, CLI, Connect",
            _kafka_env("CRONSTREAM_KAFKA_SECURITY_PROTOCOL")),
    Setting("CRONSTREAM_KAFKA_SASL_MECHANISM", "`SCRAM-SHA-512`", "`SCRAM-SHA-512`, "
            "`SCRAM-SHA-256`, `PLAIN` (only over `SASL_SSL`: refused at start over "
            "`SASL_PLAINTEXT`) or `OAUTHBEARER`", "worker, API, CLI, Connect",
            _kafka_env("CRONSTREAM_KAFKA_SASL_MECHANISM")),
    Setting("CRONSTREAM_KAFKA_SASL_USERNAME", "—", "SASL user (SCRAM, PLAIN)",
            "worker, API, CLI, Connect", _kafka_env("CRONSTREAM_KAFKA_SASL_USERNAME")),
    Setting("CRONSTREAM_KAFKA_SASL_PASSWORD", "—", "SASL password (SCRAM, PLAIN)",
            "worker, API, CLI, Connect", secret=True),
    Setting("CRONSTREAM_KAFKA_CA_FILE", "the system's trust store", "PEM of the CA that signed "
            "the brokers' certificates", "worker, API, CLI, Connect",
            _kafka_env("CRONSTREAM_KAFKA_CA_FILE")),
    Setting("CRONSTREAM_KAFKA_CERT_FILE", "—", "PEM client certificate (mTLS, with `SSL` or "
            "`SASL_SSL`)", "worker, API, CLI, Connect", _kafka_env("CRONSTREAM_KAFKA_CERT_FILE")),
    Setting("CRONSTREAM_KAFKA_KEY_FILE", "—", "PEM private key of that certificate",
            "worker, API, CLI, Connect", _kafka_env("CRONSTREAM_KAFKA_KEY_FILE")),
    Setting("CRONSTREAM_KAFKA_SSL_KEY_PASSWORD", "—", "the key file's passphrase, if encrypted",
            "worker, API, CLI, Connect", secret=True),
    Setting("CRONSTREAM_KAFKA_OAUTH_TOKEN_URL", "—", "OAUTHBEARER: the OIDC token endpoint "
            "(client credentials grant), required by the `oidc` provider; the `unsecured` and "
            "`aws-msk-iam` providers need none",
            "worker, API, CLI, Connect", _kafka_env("CRONSTREAM_KAFKA_OAUTH_TOKEN_URL")),
    Setting("CRONSTREAM_KAFKA_OAUTH_CLIENT_ID", "—", "OAUTHBEARER client id",
            "worker, API, CLI, Connect", _kafka_env("CRONSTREAM_KAFKA_OAUTH_CLIENT_ID")),
    Setting("CRONSTREAM_KAFKA_OAUTH_CLIENT_SECRET", "—", "OAUTHBEARER client secret",
            "worker, API, CLI, Connect", secret=True),
    Setting("CRONSTREAM_KAFKA_OAUTH_SCOPE", "—", "OAUTHBEARER scope (space-separated): asked of "
            "the token endpoint, or put in the unsecured JWT", "worker, API, CLI, Connect",
            _kafka_env("CRONSTREAM_KAFKA_OAUTH_SCOPE")),
    Setting("CRONSTREAM_KAFKA_OAUTH_PROVIDER", "`oidc`", "`oidc` (the token URL above), "
            "`unsecured` (a JWT Kafka's unsecured validator accepts, as the user above; tests) or "
            "`aws-msk-iam` (AWS MSK IAM through `aws-msk-iam-sasl-signer-python`)",
            "worker, API, CLI, Connect", _kafka_env("CRONSTREAM_KAFKA_OAUTH_PROVIDER")),
    Setting("CRONSTREAM_REPLICATION_FACTOR", "3 on ≥ 3 brokers, else the broker count",
            "of every topic cronstream creates", "worker, API, CLI",
            _kafka_env("CRONSTREAM_REPLICATION_FACTOR")),
    Setting("CRONSTREAM_MIN_INSYNC_REPLICAS", "2 on ≥ 3 brokers, else 1",
            "`min.insync.replicas` of those topics", "worker, API, CLI",
            _kafka_env("CRONSTREAM_MIN_INSYNC_REPLICAS")),
    Setting("CRONSTREAM_PARTITIONS", "8", "partitions of the partitioned topics (fixed for the "
            "cluster's life)", "worker, API, CLI", lambda s: s.partitions),
    Setting("CRONSTREAM_STANDBY_REPLICAS", "1", "standby replicas of the standby tables each "
            "worker keeps of the others' partitions (0: none)", "worker",
            lambda s: s.standby_replicas),
    Setting("CRONSTREAM_PG_DSN", "made from the `CRONSTREAM_PG_*` below", "PostgreSQL as the API "
            "reads the sinks' tables: libpq `key=value` or `postgresql://` URI",
            "API, CLI", lambda s: _masked_dsn(s)),
    Setting("CRONSTREAM_PG_HOST", "`127.0.0.1`", "PostgreSQL host (without a DSN)", "API, CLI",
            lambda s: s.pg_params.get("host", "")),
    Setting("CRONSTREAM_PG_PORT", "15432", "PostgreSQL port", "API, CLI",
            lambda s: s.pg_params.get("port", "")),
    Setting("CRONSTREAM_PG_DATABASE", "`cronstream`", "database", "API, CLI",
            lambda s: s.pg_params.get("dbname", "")),
    Setting("CRONSTREAM_PG_USER", "`cronstream`", "user", "API, CLI",
            lambda s: s.pg_params.get("user", "")),
    Setting("CRONSTREAM_PG_PASSWORD", "— (the local stack trusts loopback)", "password",
            "API, CLI, `sink register`", secret=True),
    Setting("CRONSTREAM_PG_SSLMODE", "libpq's `prefer`", "`disable` … `verify-full`", "API, CLI, "
            "`sink register`", lambda s: s.pg_params.get("sslmode", "")),
    Setting("CRONSTREAM_PG_SSLROOTCERT", "—", "PEM of the CA that signed PostgreSQL's certificate "
            "(`verify-ca`, `verify-full`)", "API, CLI, `sink register`",
            lambda s: s.pg_params.get("sslrootcert", "")),
    Setting("CRONSTREAM_SINK_PG_URL", "made from the PostgreSQL settings", "the JDBC URL the "
            "sinks write to, when Kafka Connect reaches PostgreSQL at another address",
            "`sink register`", lambda s: s.pg_jdbc_url),
    Setting("CRONSTREAM_SINK_PG_PASSWORD", "the PostgreSQL password", "what the sinks' configs "
            "carry as the password: a Connect config provider's reference keeps it out of "
            "Connect's topics", "`sink register`", secret=True),
    Setting("CRONSTREAM_CONNECT_URL", "`http://127.0.0.1:18083`", "Kafka Connect's REST URL",
            "`sink register`, `stack`", lambda s: s.connect_url),
    Setting("CRONSTREAM_API_URL", "`http://127.0.0.1:18080`", "the API's public URL: the CLI's "
            "default and the base of every `List-Unsubscribe` link", "worker, CLI",
            lambda s: s.api_url),
    Setting("CRONSTREAM_API_HOST", "`127.0.0.1`", "the API's bind address", "API",
            lambda s: s.api_host),
    Setting("CRONSTREAM_API_PORT", "18080", "the API's port", "API", lambda s: s.api_port),
    Setting("CRONSTREAM_WORKER_METRICS_HOST", "`127.0.0.1`", "a worker's `/metrics`, `/healthz`, "
            "`/readyz` bind address", "worker", lambda s: s.worker_metrics_host),
    Setting("CRONSTREAM_WORKER_METRICS_PORT", "16166", "their port", "worker",
            lambda s: s.worker_metrics_port),
    Setting("CRONSTREAM_SES_ENDPOINT", "AWS SES of `AWS_REGION`", "an SES-compatible endpoint "
            "(the local stack's server)", "worker",
            lambda s: s.ses_endpoint_url or "(AWS SES)"),
    Setting("CRONSTREAM_SMS_ENDPOINT", "AWS End User Messaging SMS of `AWS_REGION`", "an "
            "endpoint of its API (`pinpoint-sms-voice-v2`; the local SMS server)", "worker",
            lambda s: s.sms_endpoint_url or "(AWS End User Messaging SMS)"),
    Setting("AWS_REGION", "`us-east-1`", "SES's and SMS's region", "worker",
            lambda s: s.aws_region),
    Setting("AWS_SECRET_ACCESS_KEY", "boto3's chain (instance role, ~/.aws)", "with "
            "`AWS_ACCESS_KEY_ID`: SES credentials", "worker", secret=True),
    Setting("CRONSTREAM_EVENT_LOOP", "`uvloop`", "the workers' event loop: `uvloop` or `asyncio`",
            "worker", lambda s: s.event_loop),
    Setting("CRONSTREAM_GROUP_SESSION_TIMEOUT_S", "2 (heartbeat `_HEARTBEAT_S` 0.5)", "the "
            "workers' consumer-group session: a dead worker's partitions move after it; the "
            "brokers' `group.min.session.timeout.ms` must be at most it", "worker",
            lambda s: "session {:g} s, heartbeat {:g} s".format(*s.group_session)),
    Setting("CRONSTREAM_RECONCILER_LAG_S", "120", "how long a slot sent to run may go without a "
            "decision before the reconciler re-drives it (same fire id)", "worker",
            lambda s: s.reconciler_lag_s),
    Setting("CRONSTREAM_SES_MAX_RATE", "20000", "the SES account's sends per second", "worker",
            lambda s: s.ses_max_rate_per_s),
    Setting("CRONSTREAM_UNSUBSCRIBE_SECRET", "— (required, ≥ 16 characters)", "signs one-click "
            "unsubscribe tokens: the same on every worker and API", "worker, API", secret=True),
    Setting("CRONSTREAM_OPERATOR_KEY", "— (the operator surface answers 503)", "the operator "
            "key of `/v1/ops` and the console's operator pages", "API", secret=True),
    Setting("CRONSTREAM_CONSOLE_WORKER_METRICS", "the local stack's workers", "the workers' "
            "`/metrics` URLs (comma-separated) the console's operator pages read", "API",
            lambda s: ",".join(s.console_worker_metrics)),
    Setting("CRONSTREAM_API_KEY", "—", "the CLI's tenant API key when `--api-key` is not given",
            "CLI", secret=True),
    Setting("CRONSTREAM_BROKERS", "1", "`stack up`'s broker count when `--brokers` is not given",
            "`stack`", lambda s: s.brokers or ""),
    Setting("CRONSTREAM_STANDBY_PORT_OFFSET", "1000", "a local region b's ports above region "
            "a's ([regions.md](regions.md))", "`stack`", lambda s: s.standby_port_offset),
    Setting("CRONSTREAM_SES_LOG", "`ses-sent.jsonl`", "where the local SES server writes what "
            "it was sent (`stack up` sets its home's `ses/sent.jsonl`)", "`stack`",
            lambda s: s.ses_log),
    Setting("CRONSTREAM_SMS_LOG", "`sms-sent.jsonl`", "where the local SMS server writes what "
            "it was sent", "`stack`", lambda s: s.sms_log),
    Setting("CRONSTREAM_SNS_TOPICS", "none", "SNS topic ARNs whose SES events `POST "
            "/v1/feedback/sns` accepts (`ARN=TENANT` pins a tenant)", "API",
            lambda s: " ".join(f"{a}={t}" if t else a for a, t in s.sns_topics.items())),
    Setting("CRONSTREAM_SNS_CERT_HOSTS", "AWS's SNS hosts", "regexes a signing certificate's "
            "host must match", "API", lambda s: " ".join(s.sns_cert_hosts)),
    Setting("CRONSTREAM_SNS_ALLOW_HTTP", "off", "plain-http certificate URLs (the local SES "
            "server only)", "API", lambda s: s.sns_allow_http),
    Setting("CRONSTREAM_SNS_ALLOW_SIGNATURE_V1", "off", "accept SNS SignatureVersion 1 "
            "(SHA-1) messages too ([security.md](security.md))", "API",
            lambda s: s.sns_allow_signature_v1),
    Setting("CRONSTREAM_DNS_TIMEOUT_S", "2", "how long a webhook host's name may take to "
            "resolve, at creation and at each call", "worker, API", lambda s: s.dns_timeout_s),
    Setting("CRONSTREAM_REGION", "— (one region, no authority)", "this process's region: its "
            "sends need the region's lease ([regions.md](regions.md))", "worker, API",
            lambda s: s.region or ""),
    Setting("CRONSTREAM_AUTHORITY_DSN", "the PostgreSQL of record", "the active-region "
            "authority's database, one every region reaches", "worker, CLI",
            lambda s: "(the PostgreSQL of record)" if not os.environ.get(
                "CRONSTREAM_AUTHORITY_DSN") else MASK),
    Setting("CRONSTREAM_STANDBY_BOOTSTRAP", "—", "the other region's brokers: replication lag "
            "in `/metrics` and `lag`", "API, CLI", lambda s: s.standby_bootstrap),
    Setting("CRONSTREAM_REGION_LEASE_S", "10 (margin 2, renewed every 2)", "the region's lease; "
            "`_MARGIN_S`: a worker stops this long before its end; `_RENEW_S`: renewal period",
            "worker", lambda s: "lease {:g} s, margin {:g} s, renewed every {:g} s".format(
                *s.region_lease)),
    Setting("CRONSTREAM_REGION_RESERVE_CHUNKS", "8", "a recipient partition's chunks a walker "
            "reserves ahead in the authority: the most a deposed region leaves unknown unbegun",
            "worker", lambda s: s.region_reserve_chunks),
    Setting("CRONSTREAM_RECIPIENTS_PRUNE_INTERVAL_S", "3600", "how often the API deletes from "
            "`cronstream.recipients` what no campaign can read any more (0: never)", "API",
            lambda s: s.recipients_prune_interval_s),
)


def _masked_dsn(s: Settings) -> str:
    from psycopg import conninfo

    params = dict(s.pg_params)
    if params.get("password"):
        params["password"] = MASK
    return conninfo.make_conninfo(**params)


MASK = "****"


def effective(s: Settings, origins: Mapping[str, str] | None = None
              ) -> list[tuple[str, str, str]]:
    """(variable, effective value, where it came from) of every setting, secrets masked: a
    secret shows only whether it is set. A setting that cannot be read shows its problem.
    ``origins``: where a variable set by the process itself came from (the CLI's ``home``)."""
    rows = []
    for setting in SETTINGS:
        given = os.environ.get(setting.name)
        source = ("file" if os.environ.get(f"{setting.name}_FILE") else "environment") \
            if given else "default"
        source = (origins or {}).get(setting.name, source)
        if setting.secret:
            value = MASK if given else "(not set)"
        else:
            try:
                value = str(setting.value(s) if setting.value else given or "")
            except SystemExit as exc:
                value, source = f"INVALID: {exc}", "environment"
        rows.append((setting.name, value, source))
    return rows


def _url_problem(name: str, url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{name}={url!r} is not an http(s) URL with a host"
    return None


def is_loopback(host: str) -> bool:
    """``localhost`` (and its subdomains) or a loopback address: where plain http, a cookie
    without ``Secure`` and an unsubscribe link are only good for a local stack."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def validate(s: Settings, role: str) -> list[str]:
    """Every problem of the settings a ``role`` (``worker``, ``api`` or ``cli``) runs with, one
    line each naming the variable; empty when it can start."""
    problems: list[str] = []

    def check(read: Callable[[], object]) -> None:
        try:
            read()
        except SystemExit as exc:
            problems.append(str(exc))

    check(lambda: s.kafka_security)
    for prop in ("pg_params", "partitions", "standby_replicas", "standby_port_offset", "brokers",
                 "ses_max_rate_per_s", "runs_per_host", "soft_bounce_limit",
                 "soft_bounce_window_days", "unknown_window_s", "guard_thresholds", "sns_topics",
                 "sns_max_age_s", "recipients_prune_interval_s", "region", "region_lease",
                 "region_reserve_chunks", "group_session", "reconciler_lag_s"):
        check(lambda prop=prop: getattr(s, prop))
    for name, url in (("CRONSTREAM_API_URL", s.api_url), ("CRONSTREAM_CONNECT_URL", s.connect_url),
                      ("CRONSTREAM_SES_ENDPOINT", s.ses_endpoint_url)):
        if url and (problem := _url_problem(name, url)):
            problems.append(problem)
    for name, host in (("CRONSTREAM_API_HOST", s.api_host),
                       ("CRONSTREAM_WORKER_METRICS_HOST", s.worker_metrics_host)):
        if not host.replace(".", "").replace("-", "").replace(":", "").isalnum():
            problems.append(f"{name}={host!r} is not an address or host name to bind")
    secret = s.unsubscribe_secret
    if role in ("worker", "api") and len(secret) < 16:
        problems.append("CRONSTREAM_UNSUBSCRIBE_SECRET is not set or shorter than 16 characters "
                        "(it signs the unsubscribe links; the same on every worker and API)")
    ses = s.ses_endpoint_url or ""
    mail_leaves = not ses or not is_loopback(urlsplit(ses).hostname or "")
    link_host = urlsplit(s.api_url).hostname or ""
    if role == "worker" and mail_leaves and is_loopback(link_host):
        problems.append(f"CRONSTREAM_API_URL={s.api_url!r} is a loopback address but mail goes "
                        f"to {ses or 'AWS SES'}: every List-Unsubscribe link would be dead; set it "
                        "to the API's public https URL")
    return problems


def check_or_exit(role: str) -> Settings:
    """The settings, after ``validate``: a process stops at start with every problem, one line
    each, instead of failing later at the first use."""
    s = load()
    problems = validate(s, role)
    if problems:
        raise SettingsError("\n".join(f"config: {p}" for p in problems))
    return s


def markdown_table() -> str:
    """``SETTINGS`` as the table of docs/deploy.md (a unit test keeps the two the same)."""
    lines = ["| variable | default | what | read by |", "|---|---|---|---|"]
    for s in SETTINGS:
        name = f"`{s.name}`" + (f" (or `{s.name}_FILE`)" if s.secret else "")
        lines.append(f"| {name} | {s.default} | {s.doc} | {s.used_by} |")
    return "\n".join(lines)
