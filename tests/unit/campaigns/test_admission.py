"""Step 2 of a chunk's protocol (``streams.campaigns.admission``): what of a chunk may be sent
now, and every other address's outcome, without a broker (fake views, tables and clocks)."""

from __future__ import annotations

import asyncio
from typing import Any

from streams.campaigns.admission import Admission
from streams.campaigns.chunk_outcomes import ChunkOutcomes
from streams.campaigns.pacing import Pacer
from streams.campaigns.pool_quota import PoolQuota
from streams.runtime.token_bucket import TokenBucket

NOW = 1_000_000
TENANT = {"tenant": "t1", "senders": ["x.org"],
          "ip_pools": {"warm": {"warmup_start_ms": 0, "initial_daily_cap": 2, "growth": 1.0,
                                "max_daily_cap": None}}}
ORDER = {"campaign_id": "c1"}
CHUNK = {"emails": ["a@y.org", "b@y.org", "c@y.org"], "vars": [{}, {}, {}]}


def campaign(**changes: Any) -> dict[str, Any]:
    return {"campaign_id": "c1", "tenant": "t1", "status": "running", "sender": "news@x.org",
            "ip_pool": "default", "send_at_ms": NOW, "send_deadline_s": 60} | changes


class Suppressed(dict):
    def get_in(self, part: int, key: bytes) -> bytes | None:
        return self.get(key)


class Barrier:
    """The opt-out barrier; ``arriving`` opt-outs are applied while a chunk waits on it."""

    def __init__(self, table: Suppressed, arriving: tuple[str, ...] = ()) -> None:
        self.applied: dict[int, int] = {0: 5}
        self.table, self.arriving = table, arriving

    async def caught_up(self, partition: int) -> None:
        for email in self.arriving:
            self.table[f"t1:{email}".encode()] = b"1"
            self.applied[partition] += 1


class Gate:
    def __init__(self) -> None:
        self.returned = 0

    async def acquire(self, tenant: str, n: int) -> None:
        pass

    def give_back(self, n: int) -> None:
        self.returned += n


def admit(record: dict[str, Any], suppressed: tuple[str, ...] = (),
          arriving: tuple[str, ...] = (), deadline: int = NOW + 60_000
          ) -> tuple[list[str], ChunkOutcomes, TokenBucket, Gate]:
    """Admit CHUNK of ``record``: the addresses admitted, the others' outcomes, the bucket."""
    table = Suppressed({f"t1:{email}".encode(): b"1" for email in suppressed})
    gate = Gate()

    async def read_campaign(campaign_id: str) -> dict[str, Any]:
        return record

    async def read_tenant(name: str) -> dict[str, Any]:
        return TENANT

    async def sleep(s: float) -> None:
        pass

    admission = Admission(read_campaign, read_tenant, table, Barrier(table, arriving),  # type: ignore[arg-type]
                          Pacer(gate, clock=lambda: 0.0, now_ms=lambda: NOW),  # type: ignore[arg-type]
                          PoolQuota(read_tenant, {}, lambda: 1, now_ms=lambda: NOW, sleep=sleep),
                          now_ms=lambda: NOW)
    bucket = TokenBucket(rate_per_s=10, burst=50, tokens=50)
    outcomes = ChunkOutcomes("c1:u1:0", record, "fire", 1)
    _, allowed = asyncio.run(admission.admit(ORDER, CHUNK, 0, bucket, record, outcomes,
                                             deadline))
    return [email for email, _ in allowed], outcomes, bucket, gate


def test_a_running_campaigns_chunk_is_admitted_less_its_opted_out_addresses():
    allowed, outcomes, bucket, _ = admit(campaign(), suppressed=("b@y.org",))
    assert allowed == ["a@y.org", "c@y.org"]
    assert list(zip(outcomes.emails, outcomes.outcomes, strict=True)) == [("b@y.org", "suppressed")]
    assert bucket.tokens == 48, "an opted-out address costs no token"


def test_an_opt_out_applied_while_the_chunk_waited_holds_and_its_token_goes_back():
    allowed, outcomes, bucket, gate = admit(campaign(), arriving=("c@y.org",))
    assert allowed == ["a@y.org", "b@y.org"] and outcomes.emails == ["c@y.org"]
    assert bucket.tokens == 48 and gate.returned == 1


def test_a_cancelled_campaigns_chunk_is_recorded_cancelled_whole():
    allowed, outcomes, bucket, _ = admit(campaign(status="cancelled"))
    assert allowed == [] and set(outcomes.outcomes) == {"cancelled"}
    assert len(outcomes.emails) == 3 and bucket.tokens == 50


def test_a_sender_the_tenant_was_not_granted_fails_the_chunk():
    allowed, outcomes, _, _ = admit(campaign(sender="news@elsewhere.org"))
    assert allowed == [] and set(outcomes.outcomes) == {"failed"}
    assert outcomes.reasons[0].startswith("not sent: news@elsewhere.org is not one of")


def test_a_chunk_over_its_pools_warm_up_cap_at_the_deadline_expires_and_pays_nothing():
    # 3 addresses over a cap of 2, and no time left to wait for the next day
    allowed, outcomes, bucket, gate = admit(campaign(ip_pool="warm"), deadline=NOW)
    assert allowed == [] and set(outcomes.outcomes) == {"expired_stale"}
    assert "warm-up cap of 2" in outcomes.reasons[0]
    assert bucket.tokens == 50 and gate.returned == 3
