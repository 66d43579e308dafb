"""A warm-up IP pool's daily cap holds across campaigns and partitions; other pools are free."""

from __future__ import annotations

import uuid
from collections import Counter

import psycopg

from streams.campaigns import warmup
from streams.runtime.clock import now_ms
from tests.conftest import make_client
from tests.integration.test_campaigns import campaign_body, outcomes, upload
from tests.waiting import wait_for

CAP = 2000


def start(api, pool: str, n: int) -> str:
    created = api.post("/v1/campaigns", json={**campaign_body(seconds=1, send_deadline_s=60),
                                               "ip_pool": pool}).json()
    domain = f"{uuid.uuid4().hex[:8]}.example"
    body = "email\n" + "".join(f"r{i}@{domain}\n" for i in range(n))
    assert upload(api, created["id"], body)["recipients"] == n
    assert api.post(f"/v1/campaigns/{created['id']}/schedule").status_code == 200
    return created["id"]


def test_warmup_cap_is_shared_by_a_pools_campaigns(stack):
    pools = dict([warmup.parse_plan(f"warm={CAP}:2", now_ms())])
    with make_client(stack, ip_pools=pools, pools=["cold"]) as api:  # cold: granted, no plan
        big, small, other = start(api, "warm", 4000), start(api, "warm", 400), start(api, "cold", 400)
        for campaign_id, n in ((big, 4000), (small, 400), (other, 400)):
            wait_for(lambda c=campaign_id, n=n: len(outcomes(stack, c)) == n, timeout_s=180,
                     every_s=2)
    counts = {c: Counter(outcomes(stack, c).values()) for c in (big, small, other)}
    warm_sent = counts[big]["sent"] + counts[small]["sent"]
    assert CAP - 8 * 50 <= warm_sent <= CAP, counts  # whole chunks only: < 50 left per partition
    assert counts[big]["expired_stale"] + counts[small]["expired_stale"] == 4400 - warm_sent
    assert counts[other] == {"sent": 400}, "a pool without a warm-up plan has no cap"
    with psycopg.connect(stack.s.pg_dsn) as conn:
        reasons = {r[0] for r in conn.execute(
            "SELECT DISTINCT reason FROM ledger WHERE campaign_id IN (%s, %s) AND outcome = "
            "'expired_stale'", (big, small)).fetchall()}
    capped = f"ip pool warm reached its warm-up cap of {CAP} emails today before the deadline"
    # chunks waiting on the cap expire with it; those reached after the deadline, with the deadline
    assert capped in reasons and reasons <= {capped, "not sent by the deadline send_at + 60s"}
