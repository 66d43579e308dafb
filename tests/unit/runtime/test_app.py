"""``streams.runtime.app``'s workarounds of faust, on faust's own classes."""

from __future__ import annotations

import gc
import logging
from types import SimpleNamespace
from typing import Any, NamedTuple

import pytest
from faust.stores.rocksdb import Store

from streams.runtime import app, library_patch


class TP(NamedTuple):
    topic: str
    partition: int


def test_a_rebalance_drops_the_revoked_partitions_dbs_without_a_full_collection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """faust collected the whole heap once per table per rebalance: at 10M jobs, past the
    session (a rebalance storm). The revoked partitions' DBs still go; nothing is collected."""
    collections: list[tuple[Any, ...]] = []
    monkeypatch.setattr(gc, "collect", lambda *args: collections.append(args) or 0)
    monkeypatch.setattr(Store, "revoke_partitions", Store.revoke_partitions)  # restored after
    monkeypatch.delattr(Store, "_cronstream_no_collections", raising=False)
    app.revocations_without_collections()
    app.revocations_without_collections()  # idempotent

    store = SimpleNamespace(_dbs={0: "db0", 1: "db1", 2: "db2"},
                            logger=logging.getLogger("test"))
    table = SimpleNamespace(changelog_topic=SimpleNamespace(topics={"jobs-changelog"}))
    revoked = {TP("jobs-changelog", 1), TP("other-changelog", 2)}
    Store.revoke_partitions(store, table, revoked)  # type: ignore[arg-type]
    Store.revoke_partitions(store, table, set())  # type: ignore[arg-type]  # a table not touched

    assert store._dbs == {0: "db0", 2: "db2"}  # noqa: SLF001
    assert collections == []


def test_the_worker_consumer_polls_500_ms_not_fausts_1500(monkeypatch: pytest.MonkeyPatch) -> None:
    """A metadata refresh waited behind an idle fetch poll on the same connection (faust's
    1.5 s). The consumer faust builds gets Kafka's 500 ms, read by aiokafka at its start."""
    import inspect

    from aiokafka import AIOKafkaConsumer
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    # faust's own, though another test may have built a worker (which wraps it) first
    fausts = library_patch.original(AIOKafkaConsumerThread, "_create_worker_consumer")
    built = SimpleNamespace(_fetch_max_wait_ms=1500)
    monkeypatch.setattr(AIOKafkaConsumerThread, "_create_worker_consumer",
                        lambda self, transport: built)
    app.shorter_fetch_polls()
    app.shorter_fetch_polls()  # idempotent
    assert AIOKafkaConsumerThread._create_worker_consumer(None, None) is built  # type: ignore[arg-type]  # noqa: SLF001
    assert built._fetch_max_wait_ms == app.FETCH_MAX_WAIT_MS == 500  # noqa: SLF001
    # the names read: faust's hardcoded wait (gone upstream: drop the workaround), aiokafka's use
    assert "fetch_max_wait_ms=1500" in inspect.getsource(fausts)
    assert "fetch_max_wait_ms=self._fetch_max_wait_ms" in inspect.getsource(
        AIOKafkaConsumer.start)
