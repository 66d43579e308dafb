"""The fired topic's tail since a mark, read from a real broker (``streams.scheduling.fired_tail.read``):
what a partition's new owner leaves to the records its previous owner already wrote."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import NewTopic

from bench.spike import job
from streams.runtime.admin import client as admin_client
from streams.runtime.clock import now_ms
from streams.runtime.codec import codec
from streams.runtime.kafka_config import producer_config
from streams.scheduling import fired_tail, slots
from streams.scheduling.schedule import fire_id


def fired_value(job_id: str, slot: int, epoch: int, fired_ms: int) -> bytes:
    """A fired record as the scheduler writes it."""
    j = codec().decode(job(job_id, "0 * * * * *", slot - 60_000))
    return slots.fired_template().join(
        slots.fired_frozen(j, fire_id(job_id, slot), slot),
        slots.fired_template().encode_run({"fired_ms": fired_ms, "decision": "fired",
                                             "epoch": epoch}))


def test_the_tail_since_each_mark_is_read_whole_without_a_zombies_records(stack, monkeypatch):
    topic = f"cronstream-test-fired-{uuid.uuid4().hex[:8]}"
    admin_client(stack.s.bootstrap).create_topics([NewTopic(topic, 3, 1)])[topic].result()
    # idempotent, as the scheduler's producer is (streams.runtime.emit): without it a first batch to a
    # topic just created can be retried after later ones and land behind them (seen in CI)
    producer = Producer({**producer_config(stack.s.bootstrap), "enable.idempotence": True})
    mark = now_ms() - 60_000
    slot = mark - mark % 60_000 + 60_000

    def write(partition: int, job_id: str, epoch: int, at: int) -> None:
        producer.produce(topic, key=job_id, value=fired_value(job_id, slot, epoch, at),
                         partition=partition, timestamp=at)

    write(0, "before-the-mark", 3, mark - 5_000)
    bulk = [f"bulk-{i}" for i in range(12_000)]  # more than one batch of the consumer
    for i, job_id in enumerate(bulk):
        write(0, job_id, 3, mark + 100 + i)
    write(0, "new-owner", 4, mark + 20_000)
    write(0, "zombie", 3, mark + 20_001)  # an older epoch after a newer one: fenced off
    write(1, "only-before", 3, mark - 1)  # nothing on partition 1 since its mark
    write(2, "no-mark", 3, mark + 10)  # partition 2 has no mark: not read
    assert producer.flush(30) == 0

    waits: list[float] = []

    class Recording(Consumer):
        """The real consumer, recording how long each poll may wait for its batch."""

        def consume(self, num_messages: int = 1, timeout: float = -1) -> list:
            waits.append(timeout)
            return super().consume(num_messages, timeout)

    monkeypatch.setattr(fired_tail, "Consumer", Recording)
    fires = fired_tail.read(stack.s.bootstrap, {0: mark, 1: mark, 2: 0}, timeout_s=30,
                            topic=topic)

    assert set(fires) == {0}
    assert fires[0] == {**{fire_id(j, slot): mark + 100 + i for i, j in enumerate(bulk)},
                        fire_id("new-owner", slot): mark + 20_000}
    # its last batch is short: a poll that waited for a full batch until the timeout stalled a
    # takeover 10 s, so no poll may wait more than a moment
    assert waits and max(waits) <= fired_tail.BATCH_WAIT_S < 1, waits
