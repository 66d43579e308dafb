"""``cronstream sink register`` against a Postgres and a Connect that do not answer (integration:
it dials both; no stack needed)."""

from __future__ import annotations

from streams.runtime import settings
from streams.runtime.settings import REPO_ROOT


def test_registering_the_sinks_without_postgres_names_postgres_and_touches_no_connector(
        monkeypatch):
    """``cronstream sink register`` (docker-compose's sink-setup) before Postgres answers: a clear
    error naming the component and address, not a psycopg traceback, and no connector created
    (the Connect URL is unreachable too; reaching it would be a different error)."""
    import pytest

    from stack.local import StackError, register_sink
    from tests.conftest import free_port

    port = free_port()
    monkeypatch.delenv("CRONSTREAM_PG_DSN", raising=False)
    monkeypatch.setenv("CRONSTREAM_PG_PORT", str(port))
    with pytest.raises(StackError, match=rf"postgres: could not create the ledger tables on "
                                         rf"127\.0\.0\.1:{port} \(ledger\.sql\)"):
        register_sink(f"http://127.0.0.1:{free_port()}", settings.load(),
                      schemas_dir=REPO_ROOT / "schemas")
