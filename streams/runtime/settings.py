"""Runtime settings, read from the environment once, shared by the stack, the workers and the API.

Every port and path has a default that lets a newcomer run everything on one machine; every one
can be overridden (``CRONSTREAM_<NAME>``), e.g. to run two stacks side by side.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# How long the API may take to catch its views up when it starts: a first start (or a wiped
# store) reads the whole jobs topic, 15 s for 1M jobs (bench.scale). Whatever starts the API
# waits this long for its health, not the 60 s of the other components.
API_START_S = 900


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise SystemExit(f"{name}={raw!r} is not an integer") from exc


def _float(name: str, default: str) -> float:
    raw = os.environ.get(name) or default
    try:
        return float(raw)
    except ValueError as exc:
        raise SystemExit(f"{name}={raw!r} is not a number") from exc


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
        return listed or f"127.0.0.1:{self.kafka_port}"

    @property
    def pg_dsn(self) -> str:
        return f"host=127.0.0.1 port={self.pg_port} dbname=cronstream user=cronstream"

    @property
    def api_url(self) -> str:
        return os.environ.get("CRONSTREAM_API_URL") or f"http://127.0.0.1:{self.api_port}"

    @property
    def ses_endpoint(self) -> str:
        return os.environ.get("CRONSTREAM_SES_ENDPOINT") or f"http://127.0.0.1:{self.ses_port}"

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
    def dns_timeout_s(self) -> float:
        """How long a webhook host's name may take to resolve (``CRONSTREAM_DNS_TIMEOUT_S``,
        default 2), in the API's check and at each call: then the create is a 422 and the
        attempt a retryable failure (``streams.adapters.dns``), and no one else waits on it."""
        seconds = _float("CRONSTREAM_DNS_TIMEOUT_S", "2")
        if not 0 < seconds <= 60:
            raise SystemExit(f"CRONSTREAM_DNS_TIMEOUT_S={seconds:g} is not in (0, 60]")
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
        leaves the tenant to each event's configuration set (``streams.campaigns.feedback``)."""
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

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"


def load() -> Settings:
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
    )
