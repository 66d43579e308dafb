"""The one way an address becomes suppressed for a tenant: a ``Suppression`` on the partition of
the address, returned from only once the broker has acknowledged it.

Why here and not in the API: the API's ``/v1/suppressions`` and one-click unsubscribe, and the
worker's SES feedback agent (``streams.campaigns.bounces``) must suppress through the same
linearizable path — the fan-out's opt-out barrier (``streams.campaigns.barrier``) waits for the
suppressions partition up to its end before each send, so a suppression acknowledged here stops
every send that starts after it, whoever wrote it. The API may import the campaigns layer; the
worker may not import the API (pyproject.toml's layering contract).
"""

from __future__ import annotations

from typing import Protocol

from streams.records import Suppression
from streams.runtime import clock
from streams.runtime.codec import codec
from streams.topology import SUPPRESSIONS, TopicSpec, partition_for


class Sends(Protocol):
    """An acknowledged produce (``streams.runtime.emit.Emitter.send``)."""

    async def send(self, topic: TopicSpec, key: str, value: bytes | None,
                   partition: int | None = None,
                   headers: dict[str, str | bytes] | None = None) -> None: ...


def key(tenant: str, email: str) -> str:
    return f"{tenant}:{email}"


def record(tenant: str, email: str, reason: str, source: str, *, feedback_id: str | None = None,
           ses_message_id: str | None = None, created_ms: int | None = None) -> Suppression:
    """A ``Suppression`` (schemas/suppression.avsc) of a normalised address."""
    return {"tenant": tenant, "email": email, "reason": reason, "source": source,
            "created_ms": clock.now_ms() if created_ms is None else created_ms,
            "feedback_id": feedback_id, "ses_message_id": ses_message_id}


async def suppress(emitter: Sends, suppression: Suppression, partitions: int) -> None:
    """Write ``suppression`` (``record``) to its address's partition of ``partitions``
    (``Settings.partitions``) and return once the broker has it: from then on no send to the
    address starts."""
    email = suppression["email"]
    await emitter.send(SUPPRESSIONS, key(suppression["tenant"], email),
                       codec().encode("Suppression", suppression),
                       partition_for(email, partitions))


async def lift(emitter: Sends, tenant: str, email: str, partitions: int) -> None:
    """Lift a suppression (a tombstone on the same key and partition)."""
    await emitter.send(SUPPRESSIONS, key(tenant, email), None, partition_for(email, partitions))
