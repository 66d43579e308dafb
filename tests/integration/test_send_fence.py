"""The walkers' send fence against a real group coordinator (``streams.campaigns.ownership``).

A zombie is a member the group has moved on from while it did not know: paused past its session,
cut off, or (here) silent past its poll interval. Its walkers must be told "not yours" by the
coordinator itself, whatever the zombie still believes; the fault suite's zombie scenario shows
the same end to end, but there the zombie's own revocation often wins the race and stops its
walkers first, so this test is the one that fails deterministically when the fence is removed
(``./dev test --mutations no-send-fence``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid

from confluent_kafka import Consumer
from confluent_kafka.admin import NewTopic

from streams.campaigns.ownership import GroupFence, Ownership, describe
from streams.runtime import group_lease
from streams.runtime.admin import client as admin_client
from streams.runtime.kafka_config import client_config
from tests.waiting import wait_for

log = logging.getLogger(__name__)

# the broker's group.min.session.timeout.ms is 6 s; librdkafka wants the poll interval >= it
SESSION_MS = 6000


class Member:
    """A consumer of the group, and the partitions its rebalances gave it as far as it knows
    (learnt only while it polls)."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self.held: set[int] = set()
        self.consumer = Consumer({**client_config(bootstrap), "group.id": group,
                                  "session.timeout.ms": SESSION_MS,
                                  "max.poll.interval.ms": SESSION_MS,
                                  "enable.auto.commit": False})

    def join(self, topic: str) -> str:
        """Subscribe and poll until this member holds both partitions; its member id."""
        def assigned(_c: Consumer, tps: list) -> None:
            self.held = {tp.partition for tp in tps}

        def revoked(_c: Consumer, _tps: list) -> None:
            self.held = set()

        self.consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)
        wait_for(lambda: self.consumer.poll(0.2) is None and self.held == {0, 1}, timeout_s=60)
        return self.consumer.memberid()

    def close(self, timeout_s: float = 30.0) -> None:
        """Close, bounded. A zombie's ``close()`` once never returned (a CI run sat in it for 25
        minutes, where pytest's timeout cannot interrupt a call into librdkafka:
        confluentinc/confluent-kafka-python#1573): it polls first, so it serves the revocation
        and the poll-interval error it has pending, and the close runs in a thread this test
        waits for at most ``timeout_s``, then leaves to the process's exit."""
        for _ in range(10):
            self.consumer.poll(0.2)
        closing = threading.Thread(target=self.consumer.close, daemon=True)
        closing.start()
        closing.join(timeout_s)
        if closing.is_alive():
            log.warning("a test consumer did not close within %.0f s; left to the exit",
                        timeout_s)


def test_a_member_the_group_moved_on_from_is_fenced(stack):
    bootstrap = stack.s.bootstrap
    topic, group = f"cronstream-test-fence-{uuid.uuid4().hex[:8]}", f"fence-{uuid.uuid4().hex[:8]}"
    admin_client(bootstrap).create_topics([NewTopic(topic, 2, 1)])[topic].result()
    fence = GroupFence(lambda: describe(bootstrap, group))

    def check(member_id: str, partition: int) -> Ownership:
        return asyncio.run(fence.check(topic, partition, group_lease.Member(member_id, 0)))

    zombie, successor = Member(bootstrap, group), Member(bootstrap, group)
    try:
        zombie_id = zombie.join(topic)
        assert check(zombie_id, 0) is Ownership.OWNED, "the partitions' one member is not their owner"

        # the zombie stops polling and never learns it was dropped; its successor joins and
        # gets both partitions once the zombie's poll interval has passed
        successor_id = successor.join(topic)
        assert zombie.held == {0, 1}, "the zombie learnt of its revocation: not a zombie"

        assert check(zombie_id, 0) is Ownership.NOT_OWNED, "the zombie was let send"
        assert check(zombie_id, 1) is Ownership.NOT_OWNED, "the zombie was let send"
        assert check(successor_id, 1) is Ownership.OWNED, "the successor was fenced"
    finally:
        successor.close()
        zombie.close()
