"""The operator console and the ops endpoints (issue 40): what anonymous callers, other sites'
pages and a Kafka client's chosen names can do there. Each judged from the HTTP answers as a
browser or a scraper would see them."""

from __future__ import annotations

import os
import re
import uuid

import httpx

from stack import isolated
from streams.topology import JOBS


def console(stack, address: str = "127.0.0.1", **options) -> httpx.Client:
    """A browser-like client of the console, connecting from ``address`` (loopback)."""
    return httpx.Client(base_url=stack.s.api_url, timeout=30,
                        transport=httpx.HTTPTransport(local_address=address), **options)


def sign_in(client: httpx.Client, key: str) -> httpx.Response:
    form = client.get("/ui/login")
    token = re.search(r'name="login_token" value="([^"]+)"', form.text)
    return client.post("/ui/login", data={"key": key, "login_token": token.group(1) if token
                                          else ""})


def operator_key() -> str:
    return os.environ["CRONSTREAM_OPERATOR_KEY"]


def test_a_consumer_groups_name_is_shown_as_text_on_the_lag_page(stack):
    """Consumer groups are named by whoever runs a Kafka client: the lag chart put the name into
    the page as markup, so a group named like a tag ran script in the operator's session."""
    group = f'<img src=x onerror="alert({uuid.uuid4().hex[:6]})">'
    isolated.call("tests.security.kafka_tools:commit_group", stack.s.bootstrap, group,
                  JOBS.name, 0, 0, timeout_s=120)
    try:
        with console(stack) as browser:
            assert sign_in(browser, operator_key()).status_code == 303
            for _ in range(2):  # the chart is drawn from the second sample on
                page = browser.get("/ui/ops")
                assert page.status_code == 200
        assert "lag-chart" in page.text, "the chart is drawn"
        assert group not in page.text and "<img src=x" not in page.text
        assert "&lt;img src=x" in page.text, "shown, as text"
    finally:
        isolated.call("tests.security.kafka_tools:delete_group", stack.s.bootstrap, group,
                      timeout_s=120)


def test_metrics_need_the_operator_key_and_readyz_tells_anyone_only_its_status(stack, api):
    url = stack.s.api_url
    assert httpx.get(f"{url}/metrics", timeout=30).status_code == 401
    assert httpx.get(f"{url}/metrics", headers=api.headers, timeout=30).status_code == 401
    scraped = httpx.get(f"{url}/metrics", timeout=30,
                        headers={"Authorization": f"Bearer {operator_key()}"})
    assert scraped.status_code == 200 and "cronstream_consumer_lag" in scraped.text
    anonymous = httpx.get(f"{url}/readyz", timeout=30)
    assert set(anonymous.json()) == {"status"}, anonymous.json()
    detailed = httpx.get(f"{url}/readyz", timeout=30,
                         headers={"Authorization": f"Bearer {operator_key()}"}).json()
    assert {"status", "group", "workers", "unassigned"} <= set(detailed)


def test_a_login_needs_the_forms_token_and_sets_a_secure_cookie_off_loopback(stack, api):
    key = api.headers["Authorization"].split(" ", 1)[1]
    with console(stack) as attacker:  # another site's page posting the form: no token
        forged = attacker.post("/ui/login", data={"key": key})
        assert forged.status_code == 403 and "cronstream_console" not in forged.headers.get(
            "set-cookie", "")
    # behind a TLS proxy the API sees http, and the browser asked for the console's own name
    with console(stack, headers={"host": "console.example"}) as proxied:
        form = proxied.get("/ui/login")
        token = re.search(r'name="login_token" value="([^"]+)"', form.text).group(1)
        nonce = form.cookies["cronstream_login"]
        proxied.cookies.clear()
        signed = proxied.post("/ui/login", data={"key": key, "login_token": token},
                              headers={"cookie": f"cronstream_login={nonce}"})
    assert signed.status_code == 303
    assert "secure" in signed.headers["set-cookie"].lower()


def test_the_console_shows_no_text_a_link_put_in_its_query(stack, api):
    key = api.headers["Authorization"].split(" ", 1)[1]
    with console(stack) as browser:
        assert sign_in(browser, key).status_code == 303
        lure = "Your key has expired: re-enter it at https://evil.example"
        page = browser.get("/ui/suppressions", params={"msg": lure})
    assert page.status_code == 200 and "evil.example" not in page.text


def test_one_key_holds_a_bounded_number_of_sessions(stack, api):
    from api.console.sessions import MAX_SESSIONS_PER_KEY

    key = api.headers["Authorization"].split(" ", 1)[1]
    browsers = [console(stack) for _ in range(MAX_SESSIONS_PER_KEY + 1)]
    try:
        for browser in browsers:
            assert sign_in(browser, key).status_code == 303
        pages = [b.get("/ui/suppressions").status_code for b in browsers]
    finally:
        for browser in browsers:
            browser.close()
    assert pages[0] == 303 and pages[1:] == [200] * MAX_SESSIONS_PER_KEY, pages


def test_failed_logins_from_one_address_are_throttled(stack, api):
    from api.console.sessions import LOGIN_FAILURES

    key = api.headers["Authorization"].split(" ", 1)[1]
    # an address of its own on loopback: the throttle holds it, not the suite's 127.0.0.1
    with console(stack, address="127.0.40.9") as guesser:
        answers = [sign_in(guesser, f"cs_guess{i}").status_code for i in range(LOGIN_FAILURES)]
        held = sign_in(guesser, key)
    assert answers == [401] * LOGIN_FAILURES
    assert held.status_code == 429 and int(held.headers["retry-after"]) >= 1
    with console(stack) as elsewhere:
        assert sign_in(elsewhere, key).status_code == 303, "another address is not held"
