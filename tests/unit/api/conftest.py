"""The API in-process: ``create_app`` serving an ``ApiState`` built without a broker.

The state is the real one (its tenants and campaigns stores in memory, its jobs store a SQLite
file under ``tmp_path``); the test fills the tenants store as the tenants view would, steps the
rate limiter's clock, and reads what the routes produced from a recording emitter."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.state import ApiState
from streams.adapters.tenants import new_tenant
from streams.runtime import settings
from streams.topology import TopicSpec

JOB = {"schedule": {"cron": "0 0 1 1 *"},  # a job any tenant of ``Api.tenant`` may create
       "target": {"type": "webhook", "url": "http://127.0.0.1:9/hook"}}


class Clock:
    """Monotonic seconds that move only when a test moves them."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class RecordingEmitter:
    """Keeps what the routes send instead of producing it. Only acknowledged writes (``send``,
    ``acked``): the routes these tests call produce nothing else (recipient uploads are not
    called here)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, bytes | None]] = []

    async def send(self, topic: TopicSpec, key: str, value: bytes | None,
                   partition: int | None = None, headers: dict | None = None) -> None:
        self.sent.append((topic.name, key, value))

    async def acked(self, topic: TopicSpec, records: list[tuple[str, bytes | None]],
                    partition: int | None = None, headers: dict | None = None) -> None:
        self.sent.extend((topic.name, key, value) for key, value in records)

    def close(self) -> None:
        pass


class Api:
    """The app, its state, and a way to add tenants as the tenants topic would."""

    def __init__(self, state: ApiState, client: TestClient, clock: Clock,
                 emitter: RecordingEmitter) -> None:
        self.state, self.client, self.clock, self.emitter = state, client, clock, emitter

    def tenant(self, name: str, **options: Any) -> dict[str, str]:
        """A tenant record in the tenants store; the Authorization header of its key."""
        options.setdefault("requests_per_s", 100_000)  # never limited unless a test says so
        options.setdefault("allowed_targets", ["127.0.0.1"])
        options.setdefault("senders", ["example.com", "example.org"])
        record, key = new_tenant(name, **options)
        self.state.tenants.put(name, record)
        return {"Authorization": f"Bearer {key}"}

    def rerate(self, name: str, requests_per_s: int) -> None:
        """The tenant's record changed on the tenants topic: a new rate."""
        record = self.state.tenants.get(name)
        assert record is not None
        self.state.tenants.put(name, {**record, "requests_per_s": requests_per_s})


@pytest.fixture
def api(tmp_path, monkeypatch) -> Iterator[Api]:
    # a campaign's counts are PostgreSQL's (the ledger's triggers keep them): none here, where
    # no stack runs (the integration tests read them from the real one)
    monkeypatch.setattr("api.routes.campaigns._counts", lambda dsn, tenant, campaign_id: ({}, 0))
    clock, emitter = Clock(), RecordingEmitter()
    state = ApiState(dataclasses.replace(settings.load(), home=tmp_path), emitter, clock)
    try:
        # a loopback host: the only one whose console cookies may lack Secure (plain http here)
        with TestClient(create_app(state), base_url="http://127.0.0.1") as client:
            yield Api(state, client, clock, emitter)
    finally:
        state.close()
