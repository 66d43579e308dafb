"""What the API refuses, in-process (``create_app`` on an ``ApiState`` with no broker): 401 for
a missing or unknown key on every tenant route, 404 for a job or campaign that is not the
tenant's on every route naming one, 413 over the body limit, 422 naming the field and the
problem, 429 over the tenant's rate. A refused request writes nothing."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from api.app import MAX_BODY_BYTES, body_unlimited
from tests.api_routes import body_for, operations
from tests.unit.api.conftest import JOB, Api


def campaign_body() -> dict:
    return {"name": "launch", "from": "news@example.org", "subject": "hello", "text": "hi",
            "send_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat()}


# not a tenant's: the signed token, the operator key, SNS's signature are their credentials
TENANT_ROUTES = [op for op in operations()
                 if not op[1].startswith(("/v1/unsubscribe/", "/v1/ops/", "/v1/feedback/"))]


def detail_naming(response, loc: list, fragment: str) -> dict:
    """The item of a 4xx's ``detail`` at ``loc``, which must say ``fragment``."""
    items = response.json()["detail"]
    found = [d for d in items if d["loc"] == loc]
    assert found, (loc, items)
    assert fragment in found[0]["msg"], (fragment, found[0])
    return found[0]


@pytest.mark.parametrize(("method", "path"), TENANT_ROUTES)
def test_every_tenant_route_needs_a_known_key(api: Api, method, path):
    api.tenant("acme")
    url = path.format(job_id="j", campaign_id="c", email="x@example.org")
    for headers in ({}, {"Authorization": "Basic YWNtZTpzZWNyZXQ="}, {"Authorization": "Bearer "},
                    {"Authorization": "Bearer cs_not-a-key"}):
        response = api.client.request(method, url, headers=headers)
        assert response.status_code == 401, (method, path, headers, response.text)
        assert response.headers["WWW-Authenticate"] == "Bearer"
    assert api.emitter.sent == []


def test_the_tenant_routes_are_all_checked():
    assert len(TENANT_ROUTES) >= 17 and ("GET", "/v1/jobs/{job_id}/runs") in TENANT_ROUTES


@pytest.mark.parametrize("param", ["job_id", "campaign_id"])
def test_a_job_or_campaign_that_is_not_the_tenants_is_not_found(api: Api, param):
    owner, other = api.tenant("owner"), api.tenant("other")
    job = api.client.post("/v1/jobs", json=JOB, headers=owner)
    campaign = api.client.post("/v1/campaigns", json=campaign_body(), headers=owner)
    assert job.status_code == 201 and campaign.status_code == 201, (job.text, campaign.text)
    written = list(api.emitter.sent)
    theirs = {"job_id": job.json()["id"], "campaign_id": campaign.json()["id"]}
    unknown = {"job_id": str(uuid.uuid4()), "campaign_id": str(uuid.uuid4())}
    routes = [op for op in TENANT_ROUTES if f"{{{param}}}" in op[1]]
    assert len(routes) >= 7
    for method, path in routes:
        for ids, who in ((unknown, owner), (theirs, other)):
            url = path.format(**ids, email="x@example.org")
            options = body_for(method, path)
            headers = {**who, **options.pop("headers", {})}
            response = api.client.request(method, url, headers=headers, **options)
            assert response.status_code == 404, (method, url, response.text)
            assert response.json()["detail"][0]["msg"] == f"{param[:-3]} {ids[param]} not found"
    assert api.emitter.sent == written, "a 404 wrote something"
    assert api.client.get(f"/v1/jobs/{theirs['job_id']}", headers=owner).status_code == 200


def test_a_body_over_the_limit_is_refused_declared_or_streamed(api: Api):
    auth = api.tenant("acme")
    headers = {**auth, "content-type": "application/json"}

    def body(size: int) -> bytes:
        pad = size - len(b'{"x":""}')
        return b'{"x":"' + b"a" * pad + b'"}'

    at_limit = api.client.post("/v1/jobs", content=body(MAX_BODY_BYTES), headers=headers)
    assert at_limit.status_code == 422, "a body of exactly the limit is read (and then judged)"
    detail_naming(at_limit, ["body", "x"], "Extra inputs are not permitted")
    over = api.client.post("/v1/jobs", content=body(MAX_BODY_BYTES + 1), headers=headers)
    assert over.status_code == 413
    detail_naming(over, ["body"], f"larger than {MAX_BODY_BYTES} bytes")

    def pieces():  # no Content-Length: the body is counted as it arrives
        yield b'{"x":"'
        for _ in range(MAX_BODY_BYTES // 65536 + 1):
            yield b"a" * 65536
        yield b'"}'

    streamed = api.client.post("/v1/jobs", content=pieces(), headers=headers)
    assert streamed.status_code == 413, streamed.text
    assert api.emitter.sent == []


def test_only_the_exact_streamed_routes_may_send_a_larger_body():
    # the old rule (any path ending in /recipients) let an anonymous body of any size into
    # PUT /v1/jobs/{job_id} named "recipients" (issue 40)
    unlimited = [op for op in operations("/") if body_unlimited(op[0], op[1].replace(
        "{campaign_id}", "c1"))]
    assert sorted(unlimited) == [("POST", "/v1/job-imports/stream"),
                                 ("PUT", "/v1/campaigns/{campaign_id}/recipients")]
    for method, path in (("PUT", "/v1/jobs/recipients"), ("POST", "/v1/campaigns/c/recipients"),
                         ("PUT", "/v1/campaigns/c/recipients/x"), ("PUT", "/v1/campaigns//recipients"),
                         ("PUT", "/ui/campaigns/c/recipients"), ("POST", "/v1/job-imports"),
                         ("PUT", "/v1/job-imports/stream"), ("POST", "/v1/job-imports/stream/x")):
        assert not body_unlimited(method, path), (method, path)


def test_an_anonymous_body_over_the_limit_on_a_path_named_like_the_upload_is_refused(api: Api):
    def pieces():
        for _ in range(MAX_BODY_BYTES // 65536 + 2):
            yield b" " * 65536

    response = api.client.put("/v1/jobs/recipients", content=pieces(),
                              headers={"content-type": "application/json"})
    assert response.status_code == 413, response.text
    assert api.emitter.sent == []


def past(days: int = 2) -> str:
    return (datetime.now(UTC) - timedelta(days=days)).isoformat()


def job(**changes) -> dict:
    return {**JOB, **changes}


BAD_JOBS = [  # a body, where its problem is, what the answer must say about it
    (job(retry={"max_attempts": 0}), ["body", "retry", "max_attempts"], "greater than or equal to 1"),
    (job(surprise=1), ["body", "surprise"], "Extra inputs are not permitted"),
    (job(schedule={"cron": "* * * * *", "dst": {"gap": "sideways"}}),
     ["body", "schedule", "dst", "gap"], "'shift' or 'skip'"),
    (job(schedule={"cron": "* * * * *", "every_s": 60}), ["body", "schedule"],
     "exactly one of cron, at, every_s is required"),
    (job(schedule={"cron": "61 * * * *"}), ["body", "schedule", "cron"], "invalid cron expression"),
    (job(schedule={"cron": "0 9 * * 2#6"}), ["body", "schedule", "cron"],
     "day of week: '2#6': the week in d#n must be 1-5"),
    (job(schedule={"cron": "0 9 32W * *"}), ["body", "schedule", "cron"],
     "day of month: 32 is outside 1-31"),
    (job(schedule={"cron": "0 9 30W 2 *"}), ["body", "schedule", "cron"],
     "never matches a calendar date"),
    (job(schedule={"cron": "30 2 * 3 0#2", "timezone": "America/New_York", "dst": {"gap": "skip"}}),
     ["body", "schedule"], "has no slot after now"),  # always in the spring-forward gap
    (job(schedule={"cron": "* * * * *", "timezone": "Mars/Olympus"}),
     ["body", "schedule", "timezone"], "unknown time zone 'Mars/Olympus'"),
    (job(schedule={"at": past()}), ["body", "schedule", "at"], "further in the past"),
    (job(schedule={"cron": "*/5 * * * * *"}), ["body", "schedule"],
     "this tenant's minimum interval is 10s"),
    (job(target={"type": "webhook", "url": "ftp://example.org/x"}),
     ["body", "target", "webhook", "url"], "URL scheme should be 'http' or 'https'"),
    (job(target={"type": "webhook", "url": "http://10.1.2.3/x"}), ["body", "target", "url"],
     "not a globally routable address"),
    (job(target={"type": "kafka", "topic": "cronstream.jobs"}), ["body", "target", "topic"],
     "one of cronstream's own topics"),
    (job(target={"type": "kafka", "topic": "other.events"}), ["body", "target", "topic"],
     "must start with 'acme.'"),
    (job(target={"type": "pager"}), ["body", "target"], "'webhook', 'kafka', 'email', 'sms'"),
    (job(target={"type": "sms", "body": "hi"}), ["body", "target", "sms", "to"], "Field required"),
    (job(target={"type": "sms", "to": "555 1234", "body": "hi"}), ["body", "target", "sms", "to"],
     "E.164"),
]


@pytest.mark.parametrize(("body", "loc", "says"), BAD_JOBS, ids=[" ".join(map(str, c[1][1:]))
                                                                 + f" {i}" for i, c in enumerate(BAD_JOBS)])
def test_a_bad_job_is_refused_naming_the_field_and_the_problem(api: Api, body, loc, says):
    auth = api.tenant("acme", min_interval_s=10)
    response = api.client.post("/v1/jobs", json=body, headers=auth)
    assert response.status_code == 422, response.text
    detail_naming(response, loc, says)
    assert api.emitter.sent == []


@pytest.mark.parametrize("cron", ["0 0 29 2 *", "0 0 * 2 1#5", "0 12 L * *", "0 9 15W * *",
                                  "0 9 * * 2#2", "0 17 * * 5L"])
def test_a_job_whose_slots_are_years_apart_is_accepted_and_previews_as_many_as_asked(api: Api,
                                                                                      cron):
    """A leap-day job waits up to 8 years, Feb 29 on a Monday 40: no horizon of days refuses
    them, and ``/next?count=20`` gives 20 slots (4,000 days gave a yearly job 11)."""
    auth = api.tenant("acme")
    created = api.client.post("/v1/jobs", json=job(schedule={"cron": cron}), headers=auth)
    assert created.status_code == 201, created.text
    preview = api.client.get(f"/v1/jobs/{created.json()['id']}/next?count=20", headers=auth)
    assert preview.status_code == 200, preview.text
    slots = preview.json()["next"]
    assert len(slots) == 20 and slots == sorted(slots)


def test_a_yearly_job_previews_every_slot_asked_for(api: Api):
    auth = api.tenant("acme")
    created = api.client.post("/v1/jobs", json=JOB, headers=auth).json()["id"]  # 0 0 1 1 *
    slots = api.client.get(f"/v1/jobs/{created}/next?count=100", headers=auth).json()["next"]
    assert len(slots) == 100 and all(s.endswith("-01-01T00:00:00Z") for s in slots), slots[:2]


def test_other_bad_requests_name_the_field_and_the_problem(api: Api):
    auth = api.tenant("acme")
    created = api.client.post("/v1/jobs", json=JOB, headers=auth).json()["id"]
    written = list(api.emitter.sent)
    cases = [  # (method, url, request options, loc, what the answer says)
        ("GET", "/v1/jobs?limit=0", {}, ["query", "limit"], "greater than or equal to 1"),
        ("GET", f"/v1/jobs/{created}/runs?cursor=yesterday", {}, ["query", "cursor"],
         "valid integer"),
        ("GET", f"/v1/jobs/{created}/next?count=101", {}, ["query", "count"],
         "less than or equal to 100"),
        ("POST", "/v1/jobs", {"json": JOB, "headers": {"Idempotency-Key": "k" * 201}},
         ["header", "idempotency-key"], "at most 200 characters"),
        ("POST", f"/v1/jobs/{created}/backfill", {"json": {"from": past(1), "to": past(2)}},
         ["body"], "to must be after from"),
        ("POST", "/v1/campaigns", {"json": {**campaign_body(), "from": "news"}}, ["body", "from"],
         "not a valid email address"),
        ("POST", "/v1/campaigns", {"json": {**campaign_body(), "send_deadline_s": 5}},
         ["body", "send_deadline_s"], "greater than or equal to 60"),
        ("POST", "/v1/campaigns", {"json": {**campaign_body(), "timezone": "Mars/Olympus"}},
         ["body", "timezone"], "unknown time zone"),
        ("POST", "/v1/suppressions", {"json": {"email": "nobody"}}, ["body", "email"],
         "not an email address"),
    ]
    for method, url, options, loc, says in cases:
        headers = {**auth, **options.pop("headers", {})}
        response = api.client.request(method, url, headers=headers, **options)
        assert response.status_code == 422, (method, url, response.text)
        detail_naming(response, loc, says)
    assert api.emitter.sent == written, "a 422 wrote something"


def test_requests_over_the_tenants_rate_get_429_until_it_allows_them(api: Api):
    auth = api.tenant("acme", requests_per_s=1)  # a burst of 2
    statuses = [api.client.get("/v1/jobs", headers=auth).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    refused = api.client.get("/v1/jobs", headers=auth)
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
    assert refused.json()["detail"] == "tenant acme is over its 1 requests/s"
    other = api.tenant("other", requests_per_s=1)
    assert api.client.get("/v1/jobs", headers=other).status_code == 200, "a rate is per tenant"
    api.clock.now += 1.0
    assert [api.client.get("/v1/jobs", headers=auth).status_code for _ in range(2)] == [200, 429]


def test_a_changed_rate_holds_from_the_tenants_next_request(api: Api):
    auth = api.tenant("acme", requests_per_s=1000)
    assert all(api.client.get("/v1/jobs", headers=auth).status_code == 200 for _ in range(5))
    api.rerate("acme", 1)  # the tenants topic brings its new record
    statuses = [api.client.get("/v1/jobs", headers=auth).status_code for _ in range(4)]
    assert statuses == [200, 200, 429, 429]
    api.rerate("acme", 1000)
    api.clock.now += 0.5
    # the limiter learns of the change at the tenant's next request: until then, the old rate
    assert api.client.get("/v1/jobs", headers=auth).status_code == 429
    api.clock.now += 0.01  # 10 tokens at the new rate
    assert sum(api.client.get("/v1/jobs", headers=auth).status_code == 200 for _ in range(20)) == 10


@pytest.mark.parametrize(("headers", "fragment"), [
    ({"X-Note": "a\r\nX-Injected: 1"}, "control characters"),
    ({"X-Note": "a\nb"}, "control characters"),
    ({"Bad Name": "x"}, "not an HTTP token"),
    ({"Host": "internal.example"}, "set by cronstream"),
    ({"X-Cronstream-Fire-Id": "forged"}, "set by cronstream"),
])
def test_a_webhook_header_that_would_split_or_spoof_the_request_is_refused(api: Api, headers,
                                                                          fragment):
    acme = api.tenant("acme")
    job = {**JOB, "target": {**JOB["target"], "headers": headers}}
    response = api.client.post("/v1/jobs", json=job, headers=acme)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"][:4] == ["body", "target", "webhook", "headers"], detail
    assert fragment in detail["msg"]
    assert api.emitter.sent == []


def test_mail_from_an_identity_or_through_a_pool_not_granted_is_refused(api: Api):
    auth = api.tenant("acme", senders=["acme.example"], pools=["vip"])
    ok = api.client.post("/v1/campaigns", json={**campaign_body(), "from": "n@acme.example",
                                                 "ip_pool": "vip"}, headers=auth)
    assert ok.status_code == 201, ok.text
    written = list(api.emitter.sent)
    for body, loc in (({"from": "n@other.example"}, ["body", "from"]),
                      ({"from": "n@acme.example", "ip_pool": "theirs"}, ["body", "ip_pool"])):
        refused = api.client.post("/v1/campaigns", json={**campaign_body(), **body}, headers=auth)
        assert refused.status_code == 422, refused.text
        detail_naming(refused, loc, "cronstream tenant update")
    reminder = api.client.post("/v1/jobs", json={"schedule": {"cron": "0 0 1 1 *"}, "target": {
        "type": "email", "to": "a@example.org", "from": "n@other.example", "subject": "s",
        "text": "t"}}, headers=auth)
    assert reminder.status_code == 422
    detail_naming(reminder, ["body", "target", "from"], "not one of tenant acme's senders")
    assert api.emitter.sent == written
