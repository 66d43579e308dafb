"""Secrets come from env/config and are never written anywhere readable: no log of any process
(API, workers, Kafka, Connect, PostgreSQL, the SES server), no topic, no error body. Runs at the
end of the session (``end_of_session``, after the fault suite; before ``stack down`` by file
order) so the logs of the whole session are scanned, including this test's
own failed logins with a key-shaped string."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition

from streams.adapters.tenants import KEY_PREFIX
from streams.runtime.admin import end_offsets
from streams.runtime.kafka_config import client_config
from streams.topology import TENANTS
from tests.conftest import cluster_partitions

pytestmark = pytest.mark.end_of_session


def readable_files(stack) -> list[Path]:
    home = stack.s.home
    roots = [home / "logs", home / "ses", home / "postgres" / "data" / "log"]
    files = [p for root in roots if root.exists() for p in root.rglob("*") if p.is_file()]
    files += [p for p in (home / "postgres").glob("*.log")]
    return files


def tenants_topic_bytes(stack) -> bytes:
    consumer = Consumer({**client_config(stack.s.bootstrap),
                         "group.id": f"secrets-{uuid.uuid4()}", "enable.auto.commit": False})
    ends = end_offsets(stack.s.bootstrap,
                       [(TENANTS.name, p) for p in range(TENANTS.count(cluster_partitions()))])
    consumer.assign([TopicPartition(TENANTS.name, p, 0) for (_, p) in ends])
    left = {p for (_, p), end in ends.items() if end > 0}
    seen = bytearray()
    while left:
        for msg in consumer.consume(1000, 2.0):
            if msg.error():
                continue
            seen += (msg.key() or b"") + (msg.value() or b"")
            if msg.offset() >= ends[(TENANTS.name, msg.partition())] - 1:
                left.discard(msg.partition())
    consumer.close()
    return bytes(seen)


def test_no_secret_reaches_a_log_a_topic_or_an_error_body(stack, api):
    tenant_key = api.headers["Authorization"].removeprefix("Bearer ")
    almost_key = KEY_PREFIX + "x" * 43  # a mistyped key: sensitive too, must not be echoed
    for path in ("/v1/ops/lag", "/v1/jobs"):  # the operator's door and the tenants' door
        response = httpx.get(f"{stack.s.api_url}{path}", timeout=10,
                             headers={"Authorization": f"Bearer {almost_key}"})
        assert response.status_code == 401, (path, response.status_code)
        assert almost_key not in response.text
    secrets = {
        "tenant API key": tenant_key,
        "mistyped API key": almost_key,
        "operator key": stack.secret("CRONSTREAM_OPERATOR_KEY", "operator.key"),
        "unsubscribe signing secret": stack.secret("CRONSTREAM_UNSUBSCRIBE_SECRET",
                                                   "unsubscribe.key"),
    }
    files = readable_files(stack)
    assert any(p.name.startswith("api") for p in files), "the API's log should be scanned"
    for path in files:
        text = path.read_bytes()
        for what, value in secrets.items():
            assert value.encode() not in text, f"{what} found in {path}"
    stored = tenants_topic_bytes(stack)
    assert tenant_key.encode() not in stored, "the tenants topic stores the key, not its hash"
