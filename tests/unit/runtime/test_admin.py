"""The process's AdminClient (``streams.runtime.admin``): when it is replaced, without a broker.
(Its count of failures in a row is exercised in tests/unit/campaigns/test_ownership.py.)"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from streams.runtime import admin

BOOTSTRAP = "127.0.0.1:1"  # never contacted: the requests below answer by themselves


@pytest.fixture
def clients(monkeypatch):
    """Stand-ins for librdkafka's clients (a real one would log a refused connection every
    second to the end of the session); the replaced ones are kept, as the module keeps them."""
    monkeypatch.setattr(admin, "AdminClient", lambda config: object())
    monkeypatch.setattr(admin, "_FAILURES", {})
    admin.forget_clients()
    yield
    admin.forget_clients()


def stale() -> KafkaException:
    return KafkaException(KafkaError(KafkaError.FENCED_LEADER_EPOCH))


def test_a_request_refused_for_a_stale_leader_epoch_is_asked_again_of_a_new_client(clients):
    """A rolling restart left the AdminClient's ListOffsets refused with FENCED_LEADER_EPOCH
    until the client was replaced: firing stalled 18 s and sending 35 s."""
    seen = []

    def ask(client):
        seen.append(client)
        if len(seen) == 1:
            raise stale()
        return "answered"

    assert admin.call(BOOTSTRAP, ask) == "answered"
    assert len({id(c) for c in seen}) == 2, "asked again of the same client"


def test_a_second_stale_answer_is_raised_not_asked_for_ever(clients):
    seen = []

    def ask(client):
        seen.append(client)
        raise stale()

    with pytest.raises(KafkaException):
        admin.call(BOOTSTRAP, ask)
    assert len(seen) == 2


def test_other_failures_keep_the_client_until_it_counts_as_stuck(clients):
    seen = []

    def ask(client):
        seen.append(client)
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

    with pytest.raises(KafkaException):
        admin.call(BOOTSTRAP, ask)
    assert len(seen) == 1, "a timeout is not asked again here"
    assert admin.stale_epoch(stale()) and not admin.stale_epoch(RuntimeError("x"))


def test_a_client_another_thread_replaced_already_is_not_replaced_again(clients):
    """Threads refused together for a stale epoch: the second must keep the first's new client,
    not throw it away with a request of the first thread's retry on it."""
    failed = admin.client(BOOTSTRAP)
    admin.replace_client(BOOTSTRAP, "first", failed)
    fresh = admin.client(BOOTSTRAP)
    assert fresh is not failed
    admin.replace_client(BOOTSTRAP, "second", failed)
    assert admin.client(BOOTSTRAP) is fresh
