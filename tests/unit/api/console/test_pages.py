"""The console in-process: login, the session cookie's attributes, CSRF on every form, tenant
isolation, logout. (The pages that read the ledger are covered by the browser tests on the
stack: tests/integration/test_console_browser.py.)"""

import json
import re

import pytest

from tests.unit.api.conftest import JOB


def _key(headers: dict[str, str]) -> str:
    return headers["Authorization"].split(" ", 1)[1]


def login_form(api, base: str = "") -> dict[str, str]:
    """The login form's fields but the key: its CSRF token (its cookie kept by the client)."""
    page = api.client.get(f"{base}/ui/login")
    found = re.search(r'name="login_token" value="([^"]+)"', page.text)
    assert page.status_code == 200 and found, page.text
    return {"login_token": found.group(1)}


def sign_in(api, key: str, base: str = ""):
    return api.client.post(f"{base}/ui/login", data={**login_form(api, base), "key": key},
                           follow_redirects=False)


def _login(api, headers) -> str:
    answer = sign_in(api, _key(headers))
    assert answer.status_code == 303, answer.text
    return answer.headers["set-cookie"]


def _csrf(api) -> str:
    page = api.client.get("/ui/suppressions")  # a page that reads no Postgres
    assert page.status_code == 200, page.text
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found
    return found.group(1)


def test_pages_need_a_session(api):
    answer = api.client.get("/ui/jobs", follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/login"


def test_an_unknown_key_is_refused(api):
    answer = sign_in(api, "nope")
    assert answer.status_code == 401
    assert "unknown API key" in answer.text


def test_the_session_cookie_is_httponly_and_samesite(api):
    cookie = _login(api, api.tenant("acme"))
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie or "samesite=strict" in cookie.lower()
    assert "Secure" not in cookie  # served over http here; Secure when the request is https


def test_a_form_post_without_the_sessions_csrf_token_is_refused(api):
    headers = api.tenant("acme")
    job = api.client.post("/v1/jobs", json={**JOB, "id": "nightly"}, headers=headers).json()
    _login(api, headers)
    for forged in ({}, {"csrf": "guessed"}):
        answer = api.client.post(f"/ui/jobs/{job['id']}/pause", data=forged)
        assert answer.status_code == 403
        assert "CSRF" in answer.text
    assert api.client.get(f"/v1/jobs/{job['id']}", headers=headers).json()["paused"] is False
    answer = api.client.post(f"/ui/jobs/{job['id']}/pause", data={"csrf": _csrf(api)},
                             follow_redirects=False)
    assert answer.status_code == 303 and "paused" in answer.headers["location"]
    assert api.client.get(f"/v1/jobs/{job['id']}", headers=headers).json()["paused"] is True


def test_another_tenants_job_is_not_found(api):
    theirs = api.tenant("other")
    job = api.client.post("/v1/jobs", json={**JOB, "id": "secret"}, headers=theirs).json()
    generated = api.client.post("/v1/jobs", json=JOB, headers=theirs).json()
    _login(api, api.tenant("acme"))
    csrf = _csrf(api)
    for job_id in (job["id"], generated["id"]):
        page = api.client.get(f"/ui/jobs/{job_id}")
        assert page.status_code == 404 and "not found" in page.text
        assert api.client.post(f"/ui/jobs/{job_id}/pause", data={"csrf": csrf}).status_code == 404
        assert api.client.post(f"/ui/jobs/{job_id}/delete", data={"csrf": csrf}).status_code == 404
    assert api.client.get(f"/v1/jobs/{job['id']}", headers=theirs).json()["paused"] is False
    listing = api.client.get("/ui/jobs")  # acme has no jobs: the page reads no Postgres
    assert listing.status_code == 200
    assert "secret" not in listing.text and generated["id"] not in listing.text


def test_logout_ends_the_session(api):
    _login(api, api.tenant("acme"))
    old = api.client.cookies.get("cronstream_console")
    answer = api.client.post("/ui/logout", data={"csrf": _csrf(api)}, follow_redirects=False)
    assert answer.status_code == 303
    api.client.cookies.set("cronstream_console", old, path="/ui")  # a copy kept by an attacker
    assert api.client.get("/ui/jobs", follow_redirects=False).status_code == 303


def test_the_operator_pages_refuse_a_tenant(api):
    _login(api, api.tenant("acme"))
    assert api.client.get("/ui/ops").status_code == 403
    assert api.client.get("/ui/topology").status_code == 403


def test_the_operator_key_opens_the_operator_pages_not_a_tenants(api, monkeypatch):
    monkeypatch.setenv("CRONSTREAM_OPERATOR_KEY", "op-secret")
    answer = sign_in(api, "op-secret")
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/ops"
    topology = api.client.get("/ui/topology")
    assert topology.status_code == 200 and "<svg" in topology.text
    assert api.client.get("/ui/jobs").status_code == 403


@pytest.mark.parametrize("path", ["/ui/login", "/ui/static/console.css"])
def test_public_assets(api, path):
    assert api.client.get(path).status_code == 200


def test_edit_saves_through_the_api_and_shows_what_it_refused(api):
    headers = api.tenant("acme")
    api.client.post("/v1/jobs", json={**JOB, "id": "nightly"}, headers=headers)
    _login(api, headers)
    page = api.client.get("/ui/jobs/nightly/edit")
    assert page.status_code == 200 and "0 0 1 1 *" in page.text
    csrf = _csrf(api)
    changed = {**JOB, "name": "Nightly report", "schedule": {"cron": "0 3 * * *"}}
    answer = api.client.post("/ui/jobs/nightly/edit", data={"csrf": csrf, "body": json.dumps(changed)},
                             follow_redirects=False)
    assert answer.status_code == 303 and "saved" in answer.headers["location"]
    job = api.client.get("/v1/jobs/nightly", headers=headers).json()
    assert job["name"] == "Nightly report" and job["schedule"]["cron"] == "0 3 * * *"
    refused = api.client.post("/ui/jobs/nightly/edit", data={
        "csrf": csrf, "body": json.dumps({**changed, "schedule": {"cron": "61 * * * *"}})})
    assert refused.status_code == 422 and "schedule" in refused.text
    assert api.client.post("/ui/jobs/nightly/edit", data={"body": "{}"}).status_code == 403


def test_another_tenants_campaign_and_suppressions_are_not_shown(api):
    theirs = api.tenant("other")
    campaign = api.client.post("/v1/campaigns", headers=theirs, json={
        "name": "Their sale", "from": "news@example.com", "subject": "Hi", "text": "Hi",
        "send_at": "2099-01-01T00:00:00Z"})
    assert campaign.status_code == 201, campaign.text
    campaign_id = campaign.json()["id"]
    assert api.client.post("/v1/suppressions", headers=theirs,
                           json={"email": "theirs@example.org"}).status_code == 201
    _login(api, api.tenant("acme"))
    csrf = _csrf(api)
    assert api.client.get(f"/ui/campaigns/{campaign_id}").status_code == 404
    assert api.client.get(f"/ui/campaigns/{campaign_id}/progress").status_code == 404
    for action in ("pause", "resume", "cancel"):
        answer = api.client.post(f"/ui/campaigns/{campaign_id}/{action}", data={"csrf": csrf})
        assert answer.status_code == 404
    listing = api.client.get("/ui/campaigns")
    assert listing.status_code == 200 and campaign_id not in listing.text
    assert "theirs@example.org" not in api.client.get("/ui/suppressions").text
    looked_up = api.client.get("/ui/suppressions", params={"q": "theirs@example.org"})
    assert "not suppressed" in looked_up.text


def test_the_session_cookie_is_secure_over_https(api):
    headers = api.tenant("acme")
    answer = sign_in(api, _key(headers), "https://127.0.0.1")
    assert answer.status_code == 303 and "Secure" in answer.headers["set-cookie"]


def test_the_session_cookie_is_secure_off_loopback_even_over_plain_http(api):
    # behind a TLS proxy the API sees http: the host the browser asked for decides
    headers = api.tenant("acme")
    proxied = {"host": "console.example"}
    page = api.client.get("/ui/login", headers=proxied)
    assert "Secure" in page.headers["set-cookie"], "the login form's cookie too"
    token = re.search(r'name="login_token" value="([^"]+)"', page.text).group(1)
    nonce = page.cookies["cronstream_login"]
    api.client.cookies.clear()  # a browser would send it back over https only
    answer = api.client.post("/ui/login", headers={**proxied, "cookie": f"cronstream_login={nonce}"},
                             data={"key": _key(headers), "login_token": token},
                             follow_redirects=False)
    assert answer.status_code == 303 and "Secure" in answer.headers["set-cookie"]


def test_a_login_without_the_forms_token_is_refused(api):
    headers = api.tenant("acme")
    forged = api.client.post("/ui/login", data={"key": _key(headers)}, follow_redirects=False)
    assert forged.status_code == 403 and "sign in again" in forged.text
    login_form(api)
    guessed = api.client.post("/ui/login", data={"key": _key(headers), "login_token": "x"},
                              follow_redirects=False)
    assert guessed.status_code == 403
    assert api.client.get("/ui/jobs", follow_redirects=False).status_code == 303


def test_failed_logins_from_one_address_are_throttled(api):
    from api.console.sessions import LOGIN_FAILURES

    for _ in range(LOGIN_FAILURES):
        assert sign_in(api, "wrong").status_code == 401
    throttled = sign_in(api, _key(api.tenant("acme")))
    assert throttled.status_code == 429 and int(throttled.headers["retry-after"]) >= 1


def test_a_message_in_the_query_is_shown_only_if_the_console_signed_it(api):
    _login(api, api.tenant("acme"))
    page = api.client.get("/ui/suppressions", params={"msg": "Your key expired: re-enter it at "
                                                             "evil.example"})
    assert page.status_code == 200 and "evil.example" not in page.text
    answer = api.client.post("/ui/suppressions", data={"csrf": _csrf(api),
                                                        "email": "x@example.org"},
                             follow_redirects=False)
    shown = api.client.get(answer.headers["location"])
    assert "x@example.org is suppressed" in shown.text


def test_the_jobs_list_opens_on_the_active_jobs_with_a_count_per_state(api, monkeypatch):
    """A tenant with many completed one-offs sees the jobs it runs first, and how many are in
    each state (the page's last runs come from Postgres: none here)."""
    monkeypatch.setattr("api.console.jobs._last_runs", lambda dsn, tenant, ids: {})
    headers = api.tenant("acme")
    for job_id, paused in (("runs-daily", False), ("on-hold", True)):
        api.client.post("/v1/jobs", json={**JOB, "id": job_id, "paused": paused}, headers=headers)
    _login(api, headers)
    page = api.client.get("/ui/jobs")
    assert page.status_code == 200, page.text
    assert "runs-daily" in page.text and "on-hold" not in page.text
    assert re.search(r'aria-current="page">Active \(1\)', page.text)
    assert "Paused (1)" in page.text and "Completed (0)" in page.text and "All (2)" in page.text
    held = api.client.get("/ui/jobs", params={"state": "paused"})
    assert "on-hold" in held.text and "runs-daily" not in held.text
    every = api.client.get("/ui/jobs", params={"state": "all", "q": "on-"})
    assert "on-hold" in every.text and "runs-daily" not in every.text
