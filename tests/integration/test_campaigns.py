"""Campaigns on the real stack: upload (saga, bad rows, duplicates), schedule, fan-out through
the local SES server, suppressions, deadlines, and the Postgres ledger agreeing with the API."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import httpx
import psycopg

from stack import isolated
from streams.campaigns.recipients import CHUNK
from streams.topology import RECIPIENT_OUTCOMES, partition_for
from tests.conftest import cluster_partitions
from tests.integration.helpers import sink_caught_up
from tests.waiting import wait_for

TERMINAL = {"sent", "suppressed", "expired_stale", "failed", "unknown", "cancelled"}


def campaign_body(seconds: int = 3, **extra) -> dict:
    return {"name": "Spring sale", "from": "news@example.com", "subject": "Hello {{name}}",
            "text": "Hi {{name}}, spring is here.",
            "send_at": (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat(),
            "send_deadline_s": 600, **extra}


def csv_lines(n: int, start: int = 0, domain: str = "example.org") -> str:
    return "email,name\n" + "".join(f"user{i}@{domain},User {i}\n" for i in range(start, start + n))


def upload(api, campaign_id: str, body: str, kind: str = "text/csv") -> dict:
    response = api.put(f"/v1/campaigns/{campaign_id}/recipients", content=body.encode(),
                       headers={"content-type": kind}, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()


def outcomes(stack, campaign_id: str) -> dict[str, str]:
    with psycopg.connect(stack.s.pg_dsn) as conn:
        try:
            rows = conn.execute("SELECT email, outcome FROM ledger WHERE kind = 'campaign' AND "
                                "campaign_id = %s", (campaign_id,)).fetchall()
        except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn):
            return {}  # the sink creates the table and its columns with the first records
    return dict(rows)


def ses_log_end(stack) -> int:
    """Where the SES server's log ends now: ``ses_sent(stack, since=...)`` reads only what came
    after (a dev machine's log held 1.3M mails, and parsing it all took seconds per poll)."""
    return stack.ses_log.stat().st_size if stack.ses_log.exists() else 0


def ses_sent(stack, since: int = 0) -> list[dict]:
    if not stack.ses_log.exists():
        return []
    with stack.ses_log.open("rb") as log:
        log.seek(since)
        return [json.loads(line) for line in log.read().splitlines() if line]


def run_campaign(stack, api, n: int, **extra) -> tuple[dict, dict[str, str]]:
    created = api.post("/v1/campaigns", json=campaign_body(**extra)).json()
    report = upload(api, created["id"], csv_lines(n))
    assert report["recipients"] == n and report["status"] == "ready"
    assert api.post(f"/v1/campaigns/{created['id']}/schedule").json()["status"] == "scheduled"
    return created, report


def test_campaign_sends_each_recipient_exactly_once(stack, api):
    n = 3000
    start = ses_log_end(stack)
    created, _ = run_campaign(stack, api, n)
    done = wait_for(lambda: (o := outcomes(stack, created["id"])) and len(o) == n and o,
                    timeout_s=180, every_s=2)
    assert Counter(done.values()) == {"sent": n}
    mails = [m for m in ses_sent(stack, since=start) if "List-Unsubscribe" in m["headers"]
             and created["id"] in _token_campaign(m)]
    per_address = Counter(m["to"] for m in mails)
    assert len(per_address) == n and max(per_address.values()) == 1, "a recipient got it twice"
    assert all(m["headers"]["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
               for m in mails)
    status = api.get(f"/v1/campaigns/{created['id']}").json()
    assert status["counts"]["sent"] == n and status["counts"]["pending"] == 0
    assert status["status"] == "done"
    one = api.get(f"/v1/campaigns/{created['id']}/recipients/USER7@example.org").json()
    assert one["outcome"] == "sent" and one["message_id"].startswith("local-")


def _token_campaign(mail: dict) -> str:
    from streams.campaigns import unsubscribe
    from streams.runtime import settings

    url = mail["headers"].get("List-Unsubscribe", "").strip("<>")  # reminder emails have none
    try:
        return unsubscribe.verify(settings.load().unsubscribe_secret, url.rsplit("/", 1)[1])[2]
    except Exception:
        return ""


def test_upload_reports_bad_rows_and_counts_duplicates_once(stack, api):
    created = api.post("/v1/campaigns", json=campaign_body(seconds=3600)).json()
    body = ("email,name\n" + "a@example.org,A\n" + "broken-address,B\n" + "A@EXAMPLE.ORG,A2\n"
            + "c@example.org\n" + "d@example.org,\"D\"\n")
    report = upload(api, created["id"], body)
    assert report["recipients"] == 2 and report["duplicates"] == 1
    assert {(b["line"], b["reason"].split(" ")[0]) for b in report["bad_rows_listed"]} == {
        (3, "invalid"), (5, "expected")}
    bad_utf8 = b"email\nx@example.org\n\xff\xfe@bad\n"
    response = api.put(f"/v1/campaigns/{created['id']}/recipients", content=bad_utf8,
                       headers={"content-type": "text/csv"})
    assert response.json()["bad_rows_listed"] == [{"line": 3, "reason": "invalid UTF-8"}]
    ndjson = '{"email": "n@example.org"}\n{oops\n'
    report = upload(api, created["id"], ndjson, "application/x-ndjson")
    assert report["recipients"] == 1 and report["bad_rows_listed"][0]["line"] == 2
    assert api.put(f"/v1/campaigns/{created['id']}/recipients", content=b"x",
                   headers={"content-type": "text/plain"}).status_code == 415


def test_only_a_ready_campaign_can_be_scheduled(api):
    created = api.post("/v1/campaigns", json=campaign_body()).json()
    response = api.post(f"/v1/campaigns/{created['id']}/schedule")
    assert response.status_code == 409 and "ready" in response.text


def test_a_rate_the_walkers_cannot_pace_is_refused_naming_the_field(api):
    """Pacing divides the rate among the partitions' walkers: zero, negative or not a number is
    a 422 that names ``max_rate_per_s``, and nothing is created."""
    for rate in (0, -5, "fast", 100_001):
        campaign_id = f"bad-rate-{uuid.uuid4().hex[:8]}"
        response = api.post("/v1/campaigns", json=campaign_body(id=campaign_id, max_rate_per_s=rate))
        assert response.status_code == 422 and "max_rate_per_s" in response.text, response.text
        assert api.get(f"/v1/campaigns/{campaign_id}").status_code == 404


# How long after an opt-out's acknowledgement a mail to its address may still reach SES: a chunk
# that passed its barrier just before the acknowledgement still writes its intent (acknowledged
# by the broker) and asks the fence (a round of DescribeConsumerGroups, from a child process)
# before its call. Under a second on a quiet box; the bound allows a loaded one.
IN_FLIGHT_AT_ACK_MS = 5000


def not_in_upload_order(mailed: set[str], upload: list[str]) -> dict[int, list[int]]:
    """The recipient partitions whose mail did not leave in upload order, with the positions in
    the partition's share of the upload that were mailed. A walker paces its chunks in the order
    it read them (``streams.campaigns.pacing.Turns``), so what a partition has mailed is the
    start of its share, all but the chunk being sent: its last position is below the end of the
    chunk that count reaches into. In two regions this is what keeps a failover's ``unknown``
    to the mail in flight (chunks sent out of order reserve the partition far ahead)."""
    shares: dict[int, list[str]] = {}
    for email in upload:
        shares.setdefault(partition_for(email, cluster_partitions()), []).append(email)
    late: dict[int, list[int]] = {}
    for part, share in shares.items():
        at = [i for i, email in enumerate(share) if email in mailed]
        if at and max(at) >= -(-len(at) // CHUNK) * CHUNK:
            late[part] = at
    return late


def test_suppression_acknowledged_mid_campaign_stops_sends(stack, api):
    """Opt-out is linearizable: once the API acknowledges an address's opt-out, no send to it
    starts. Judged from the SES server's own log (when it accepted each mail) against each
    opt-out's acknowledgement time, recorded as the 201 came back: a victim mailed more than
    ``IN_FLIGHT_AT_ACK_MS`` after its acknowledgement is a violation; within it its chunk may
    have passed its barrier just before. At least ten victims must never have been mailed (and
    be recorded ``suppressed``), or the check meant little. Its first mails also show each
    partition's chunks leaving in upload order (``not_in_upload_order``)."""
    n = 2000
    # 50/s: one 50-recipient chunk a second (each partition's every 8 s), so most victims stay
    # unsent for seconds after their opt-outs are acknowledged
    start = ses_log_end(stack)
    created, _ = run_campaign(stack, api, n, max_rate_per_s=50)

    def mailed() -> dict[str, int]:
        """Each address of the campaign the SES server accepted, and when (its first mail)."""
        at: dict[str, int] = {}
        for mail in ses_sent(stack, since=start):
            if _token_campaign(mail) == created["id"]:
                at.setdefault(mail["to"], mail["at_ms"])
        return at

    wait_for(lambda: len(mailed()) > 100, timeout_s=60, every_s=0.5)
    already = mailed()
    assert not_in_upload_order(set(already), [f"user{i}@example.org" for i in range(n)]) == {}
    # spread over the unsent: most are seconds away
    unsent = [f"user{i}@example.org" for i in range(n) if f"user{i}@example.org" not in already]
    victims = unsent[::max(1, len(unsent) // 30)][:30]

    def opt_out(email: str) -> tuple[int, int]:
        code = api.post("/v1/suppressions", json={"email": email, "reason": "asked"}).status_code
        return code, time.time_ns() // 1_000_000

    # all at once: one by one they took about as long as the campaign itself
    with ThreadPoolExecutor(len(victims)) as pool:
        acked = dict(zip(victims, pool.map(opt_out, victims), strict=True))
    assert [code for code, _ in acked.values()] == [201] * len(victims)
    done = wait_for(lambda: (o := outcomes(stack, created["id"])) and len(o) == n and o,
                    timeout_s=240, every_s=2)
    wait_for(sink_caught_up(stack, RECIPIENT_OUTCOMES))
    mails = mailed()
    late = {v: mails[v] - acked[v][1] for v in victims
            if v in mails and mails[v] > acked[v][1] + IN_FLIGHT_AT_ACK_MS}
    assert late == {}, f"mailed this many ms after their opt-outs were acknowledged: {late}"
    kept = [v for v in victims if v not in mails]
    assert len(kept) >= 10, f"only {len(kept)} victims never mailed: the check meant little"
    assert {done[v] for v in kept} == {"suppressed"}, [done[v] for v in kept]


def test_one_click_unsubscribe(stack, api):
    start = ses_log_end(stack)
    created, _ = run_campaign(stack, api, 10)
    wait_for(lambda: len(outcomes(stack, created["id"])) == 10, timeout_s=90)
    mail = next(m for m in ses_sent(stack, since=start) if _token_campaign(m) == created["id"])
    url = mail["headers"]["List-Unsubscribe"].strip("<>")
    assert httpx.post(url, data={"List-Unsubscribe": "One-Click"}).status_code == 200
    forged = url[:-4] + ("AAAA" if not url.endswith("AAAA") else "BBBB")
    assert httpx.post(forged).status_code == 400
    again, _ = run_campaign(stack, api, 10)
    done = wait_for(lambda: (o := outcomes(stack, again["id"])) and len(o) == 10 and o,
                    timeout_s=90)
    assert done[mail["to"]] == "suppressed"


def test_deadline_passing_expires_the_rest(stack, api):
    created = api.post("/v1/campaigns", json=campaign_body(seconds=2, send_deadline_s=60,
                                                           max_rate_per_s=8)).json()
    upload(api, created["id"], csv_lines(1000))
    api.post(f"/v1/campaigns/{created['id']}/schedule")
    done = wait_for(lambda: (o := outcomes(stack, created["id"])) and len(o) == 1000 and o,
                    timeout_s=150, every_s=2)
    counts = Counter(done.values())
    assert counts["expired_stale"] > 0 and counts["sent"] > 0
    assert set(counts) <= {"sent", "expired_stale"}


def produce_suppressions(bootstrap: str, tenant: str, emails: list[str]) -> int:
    """Opt-outs written as the API writes them, many at once; runs in a child process
    (``stack.isolated``): the test run keeps no Kafka client."""
    from streams.runtime.clock import now_ms
    from streams.runtime.codec import codec
    from streams.runtime.emit import Emitter
    from streams.topology import SUPPRESSIONS, partition_for

    emitter = Emitter(bootstrap, "test-suppressions")
    for email in emails:
        record = {"tenant": tenant, "email": email, "reason": "asked", "source": "api",
                  "created_ms": now_ms()}
        emitter.produce(SUPPRESSIONS, f"{tenant}:{email}", codec().encode("Suppression", record),
                        partition_for(email, cluster_partitions()))
    return emitter.flush()


def test_opted_out_addresses_do_not_slow_a_paced_campaign(stack, api):
    """A walker paces a chunk for the addresses it will send, not for its opt-outs (they are
    checked again once it has waited, and tokens of addresses opted out meanwhile go back). At
    16/s each of the 8 walkers may send a 50-recipient chunk every 25 s; with seven of every
    eight addresses opted out a walker's 4-5 chunks fit the 60 s deadline (the least allowed)
    only if the opted-out ones cost nothing: paying for them, its third chunk would be due 50-72
    s in and its fourth 75-97 s in, and they would expire."""
    n = 1600
    opted_out = [f"user{i}@example.org" for i in range(n) if i % 8]
    assert isolated.call(f"{__name__}:produce_suppressions", stack.s.bootstrap, api.tenant,
                         opted_out, timeout_s=120) == 0
    created, _ = run_campaign(stack, api, n, max_rate_per_s=16, send_deadline_s=60)
    done = wait_for(lambda: (o := outcomes(stack, created["id"])) and len(o) == n and o,
                    timeout_s=240, every_s=2)
    assert Counter(done.values()) == {"sent": 200, "suppressed": 1400}, Counter(done.values())
