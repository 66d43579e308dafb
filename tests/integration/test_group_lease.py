"""The member's lease from its heartbeats (``streams.runtime.group_lease``) against a real group
coordinator and aiokafka's own consumer (faust's).

The send fence answers from the lease without asking the coordinator, so the lease must have run
out before the coordinator can give the member's partitions to anyone else. Here a member's event
loop is frozen (a zombie: a long GC, SIGSTOP, a frozen VM) while another member joins and, once
the frozen one's session ends, takes both partitions: by then the frozen member's lease must no
longer hold. Fails when the lease outlives the session (``./dev test --mutations
lease-outlives-session``).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.consumer.group_coordinator import GroupCoordinator
from confluent_kafka.admin import NewTopic

from streams.runtime.admin import client as admin_client
from streams.runtime.group_lease import GroupLease, Member, heartbeats_renew
from tests.integration.test_send_fence import Member as Successor
from tests.waiting import wait_for

SESSION_MS = 2000  # the local stack's group.min.session.timeout.ms is 1 s
FROZEN_S = 15.0


def test_a_member_whose_loop_froze_has_no_lease_once_its_partitions_moved(stack, monkeypatch):
    bootstrap = stack.s.bootstrap
    topic, group = f"cronstream-test-lease-{uuid.uuid4().hex[:8]}", f"lease-{uuid.uuid4().hex[:8]}"
    admin_client(bootstrap).create_topics([NewTopic(topic, 2, 1)])[topic].result()
    monkeypatch.setattr(GroupCoordinator, "_send_req", GroupCoordinator._send_req)  # restored after
    lease = GroupLease(group, session_s=SESSION_MS / 1000, rebalance_s=60.0)
    heartbeats_renew(lease)

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="zombie-loop", daemon=True)
    thread.start()

    def on_zombie(coroutine, timeout_s: float = 60.0):
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout_s)

    async def start() -> AIOKafkaConsumer:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                    session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500,
                                    enable_auto_commit=False)
        await consumer.start()
        return consumer

    async def assigned(consumer: AIOKafkaConsumer) -> set[int]:
        await consumer.getmany(timeout_ms=200)
        return {tp.partition for tp in consumer.assignment()}

    zombie = on_zombie(start())
    successor = Successor(bootstrap, group)
    try:
        wait_for(lambda: on_zombie(assigned(zombie)) == {0, 1}, timeout_s=60)
        coordinator = zombie._coordinator  # noqa: SLF001
        member = Member(coordinator.member_id, coordinator.generation)
        wait_for(lambda: lease.holds(member), timeout_s=10)

        loop.call_soon_threadsafe(time.sleep, FROZEN_S)  # no heartbeat leaves while it sleeps
        frozen_at = time.monotonic()
        successor.join(topic)  # returns once the successor holds both partitions
        moved_after_s = time.monotonic() - frozen_at
        if moved_after_s >= FROZEN_S:
            pytest.fail(f"the partitions moved only after the zombie woke ({moved_after_s:.1f} s)")
        assert not lease.holds(member), (
            f"the zombie's lease still held {moved_after_s:.1f} s after its loop froze, with its "
            "partitions given to another member: the fence would have let it send")
    finally:
        successor.close()
        try:
            on_zombie(zombie.stop(), timeout_s=FROZEN_S + 30)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
