"""docker-compose.yml must describe the same stack the local scripts start."""

from pathlib import Path

import yaml

from stack.local import BROKER_INDEX_BYTES
from streams.runtime import settings
from streams.runtime.settings import REPO_ROOT


def test_compose_has_every_component_on_the_local_ports(monkeypatch):
    for name in ("KAFKA_PORT", "CONNECT_PORT", "PG_PORT", "API_PORT"):
        monkeypatch.delenv(f"CRONSTREAM_{name}", raising=False)
    conf = settings.load()
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"kafka", "connect", "postgres", "worker", "api", "sink-setup"} <= set(services)
    published = {s: [p.split(":")[0] for p in v.get("ports", [])] for s, v in services.items()}
    assert published["kafka"] == [str(conf.kafka_port)]
    assert published["connect"] == [str(conf.connect_port)]
    assert published["postgres"] == [str(conf.pg_port)]
    assert published["api"] == [str(conf.api_port)]
    for name in ("kafka", "connect", "postgres", "worker", "api"):
        assert "healthcheck" in services[name], name
    assert "3.9" in services["kafka"]["image"]
    connect_docker = Path(REPO_ROOT / "connectors" / "Dockerfile").read_text()
    debezium = (REPO_ROOT / "stack" / "pom.xml").read_text().split("<debezium.version>")[1]
    assert debezium.split("<")[0] in connect_docker, "Connect image and local stack use one Debezium"


def test_compose_healthchecks_probe_readiness(monkeypatch):
    monkeypatch.delenv("CRONSTREAM_WORKER_METRICS_PORT", raising=False)
    monkeypatch.delenv("CRONSTREAM_API_PORT", raising=False)
    conf = settings.load()
    services = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())["services"]
    assert f"localhost:{conf.worker_metrics_port}/readyz" in services["worker"]["healthcheck"]["test"][1]
    assert services["worker"]["environment"]["CRONSTREAM_WORKER_METRICS_HOST"] == "0.0.0.0"
    assert f"localhost:{conf.api_port}/readyz" in services["api"]["healthcheck"]["test"][1]


def test_the_app_image_holds_every_package_and_file_the_app_reads():
    """The image copies named folders and files; a package the code imports (``ops``) or a file
    ``cronstream sink register`` reads (the sinks' configs, the ledger's SQL) left out of it is an
    image that fails at start."""
    from stack.local import LEDGER_SQL, SINK_TEMPLATES

    copied = set()
    for line in (REPO_ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            copied.update(part.rstrip("/") for part in line.split()[1:-1])
    packages = {p.parent.name for p in REPO_ROOT.glob("*/__init__.py")} - {"tests", "bench"}
    assert packages <= copied, f"packages not in the image: {sorted(packages - copied)}"
    files = {str(path.relative_to(REPO_ROOT)) for path in (LEDGER_SQL, *SINK_TEMPLATES)}
    assert files <= copied, f"files not in the image: {sorted(files - copied)}"


def test_compose_broker_preallocates_the_local_stacks_index_size():
    kafka = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())["services"]["kafka"]
    assert int(kafka["environment"]["KAFKA_LOG_INDEX_SIZE_MAX_BYTES"]) == BROKER_INDEX_BYTES


def test_the_stateful_services_keep_their_home_on_a_volume():
    """A worker's RocksDB and the API's jobs store live under CRONSTREAM_HOME: on a container's
    own disk a restart would recover every changelog and re-read the whole jobs topic."""
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    home = next(line.split("=", 1)[1] for line in dockerfile.splitlines()
                if line.startswith("ENV CRONSTREAM_HOME="))
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    for name in ("worker", "api"):
        mounts = dict(v.split(":") for v in compose["services"][name].get("volumes", []))
        assert home in mounts.values(), name
        assert next(k for k, v in mounts.items() if v == home) in compose["volumes"], name


class FakeConnect:
    """Kafka Connect's REST API as ``_register_one`` sees it: each GET of the status answers the
    next of ``statuses`` (the last one repeats)."""

    class HTTPError(Exception):
        """Never raised here: what ``_register_one`` retries on must not swallow its verdicts."""

    def __init__(self, *statuses):
        self.statuses = list(statuses)

    def put(self, url, **_):
        return type("Response", (), {"status_code": 200, "text": ""})()

    def post(self, url, **_):
        return None

    def get(self, url, **_):
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return type("Response", (), {"json": lambda self: status})()


def _status(*tasks):
    return {"connector": {"state": "RUNNING"},
            "tasks": [{"id": i, "state": state, **({"trace": trace} if trace else {})}
                      for i, (state, trace) in enumerate(tasks)]}


SPEC = {"name": "cronstream-ledger-sink",
        "config": {"topics": "cronstream.ledger", "collection.name.format": "ledger"}}


def _register(monkeypatch, connect):
    from types import SimpleNamespace

    from stack.local import kafka_connect

    monkeypatch.setattr(kafka_connect, "httpx", connect)
    monkeypatch.setattr(kafka_connect, "time", SimpleNamespace(monotonic=iter(range(10**6)).__next__,
                                                               sleep=lambda s: None))
    kafka_connect._register_one("http://connect", SPEC, None, timeout_s=50)


def test_a_task_failed_before_the_restart_is_waited_for_until_it_runs(monkeypatch):
    """The restart of a FAILED task (a sink stopped by a record the old converter could not read)
    happens after the request returns: its old failure, still in the status, is not news."""
    old = ("FAILED", "DataException: unknown schema fingerprint d4413d2123f2c93e")
    connect = FakeConnect(_status(old), _status(old), _status(old), _status(("RUNNING", None)))
    _register(monkeypatch, connect)
    assert len(connect.statuses) == 1  # every status was read: it waited for RUNNING


def test_a_new_failure_after_the_restart_stops_registering_with_its_trace(monkeypatch):
    import pytest

    from stack.local import StackError

    old, new = ("FAILED", "unknown schema fingerprint"), ("FAILED", "cannot decode: EOF")
    with pytest.raises(StackError, match="sink task failed: cannot decode: EOF"):
        _register(monkeypatch, FakeConnect(_status(old), _status(old), _status(new)))
    with pytest.raises(StackError, match="sink task failed: boom"):  # a fresh connector's task
        _register(monkeypatch, FakeConnect({"error_code": 404}, _status(("FAILED", "boom"))))


def test_a_task_that_stays_failed_is_reported_with_its_trace_at_the_deadline(monkeypatch):
    import pytest

    from stack.local import StackError

    old = ("FAILED", "unknown schema fingerprint")
    with pytest.raises(StackError, match="not RUNNING after 50s; its task is still FAILED: unknown"):
        _register(monkeypatch, FakeConnect(_status(old)))


def test_every_app_service_is_configured_by_settings_and_reaches_the_others_by_name():
    """The API reads PostgreSQL at ``postgres``, not at its own 127.0.0.1; the worker mails
    through the ``ses`` service with a link base and a signing secret; every variable set is one
    of the settings (docs/deploy.md)."""
    services = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())["services"]
    known = {s.name for s in settings.SETTINGS} | {"AWS_ACCESS_KEY_ID", "CRONSTREAM_SES_LOG"}
    for name in ("worker", "api", "sink-setup", "ses"):
        env = services[name].get("environment", {})
        assert set(env) <= known, (name, set(env) - known)
        assert not any("127.0.0.1" in str(v) or "localhost:5432" in str(v) for v in env.values())
    assert services["api"]["environment"]["CRONSTREAM_PG_HOST"] == "postgres"
    assert services["sink-setup"]["environment"]["CRONSTREAM_PG_HOST"] == "postgres"
    worker = services["worker"]["environment"]
    assert worker["CRONSTREAM_SES_ENDPOINT"] == "http://ses:18025"
    assert {"CRONSTREAM_API_URL", "CRONSTREAM_UNSUBSCRIBE_SECRET"} <= set(worker)
    assert services["api"]["environment"]["CRONSTREAM_API_HOST"] == "0.0.0.0"


def test_compose_broker_allows_the_workers_group_session():
    """The workers' session (``Settings.group_session``, 2 s) is below Kafka's default minimum
    (6 s): a compose broker without this refuses them (they stop at start, naming both)."""
    from streams.runtime import settings

    kafka = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())["services"]["kafka"]
    allowed_ms = int(kafka["environment"]["KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS"])
    assert allowed_ms <= settings.load().group_session[0] * 1000
