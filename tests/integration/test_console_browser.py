"""The web console in a real browser (Chromium through Playwright) on the shared stack: sign in
with a tenant's key, create a job and watch its slots on the timeline, pause it and see
``skipped_paused``, trigger it, watch a small campaign's bar reach 100 % without a reload, look
an address up, find another tenant's job "not found", see a forged form post refused, sign out;
the operator's pages; ``/docs`` rendering with no network but the stack's.

Waits are on what the page shows (Playwright's ``expect``, or a reload until the server-rendered
timeline shows the slot), never on a length of time.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from cli.demo import Receiver
from tests.conftest import free_port, make_client
from tests.integration.browser import ensure_chromium, screenshot
from tests.integration.test_campaigns import campaign_body, csv_lines
from tests.waiting import wait_for

TIMEOUT_MS = 90_000  # only bounds a failing wait
expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium = ensure_chromium()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True,
                                    args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture(scope="module")
def tenant(stack):
    with make_client(stack) as client:
        yield client


def sign_in(page: Page, stack, key: str) -> None:
    page.goto(f"{stack.s.api_url}/ui/login")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()


def key_of(client) -> str:
    return client.headers["Authorization"].split(" ", 1)[1]


def reload_until(page: Page, selector: str, explain: str) -> None:
    """The job page is rendered on the server: reload it until ``selector`` is on it."""
    def shown() -> bool:
        page.reload()
        return page.locator(selector).count() > 0
    wait_for(shown, timeout_s=TIMEOUT_MS / 1000, every_s=1, explain=lambda: explain)


def test_a_job_from_creation_to_pause_and_trigger(stack, tenant, page):
    with Receiver(port := free_port(), quiet=True):
        sign_in(page, stack, key_of(tenant))
        expect(page.get_by_role("heading", name="Jobs")).to_be_visible()
        page.get_by_label("Id (optional)").fill("console-job")
        page.get_by_label("Name").fill("Console job")
        page.get_by_label("Cron").fill("*/2 * * * * *")
        page.get_by_label("Webhook URL").fill(f"http://127.0.0.1:{port}/hook")
        page.get_by_role("button", name="Create job").click()
        expect(page.get_by_role("status")).to_contain_text("job created")
        expect(page.locator(".facts")).to_contain_text("every 2 seconds")

        reload_until(page, "table.timeline .slot.ok", "no succeeded slot on the timeline")
        expect(page.locator("table.timeline tr.run").first).to_contain_text("fired")

        page.get_by_role("button", name="Pause").click()
        expect(page.get_by_role("status")).to_contain_text("paused")
        reload_until(page, "table.timeline .slot.paused", "no skipped_paused slot")
        expect(page.locator("table.timeline .slot.paused").first).to_have_text("skipped_paused")

        page.get_by_role("link", name="Only slots that did not run").click()
        expect(page.locator("table.timeline .slot.paused").first).to_be_visible()
        expect(page.locator("table.timeline .slot.ok")).to_have_count(0)

        page.get_by_role("button", name="Resume").click()
        expect(page.get_by_role("status")).to_contain_text("resumed")
        page.get_by_role("button", name="Trigger now").click()
        expect(page.get_by_role("status")).to_contain_text("triggered: fire id")
        screenshot(page, "job")  # succeeded and skipped_paused slots on its timeline

        page.get_by_role("link", name="Edit").click()
        definition = json.loads(page.get_by_label("Definition (JSON)").input_value())
        page.get_by_label("Definition (JSON)").fill(json.dumps({**definition,
                                                                "name": "Console job, renamed"}))
        page.get_by_role("button", name="Save").click()
        expect(page.get_by_role("status")).to_contain_text("saved")
        expect(page.get_by_role("heading", level=1)).to_contain_text("Console job, renamed")

        page.get_by_role("link", name="Jobs", exact=True).click()
        page.get_by_label("Search").fill("console")
        page.get_by_role("button", name="Search").click()
        expect(page.locator("table.jobs")).to_contain_text("Console job")
        expect(page.locator("table.jobs")).to_contain_text("every 2 seconds")
        screenshot(page, "jobs")

        page.goto(f"{stack.s.api_url}/ui/jobs/console-job/delete")
        page.get_by_role("button", name="Delete the job").click()
        expect(page.get_by_role("status")).to_contain_text("deleted")


def test_a_campaigns_bar_reaches_100_percent_live(stack, tenant, page):
    created = tenant.post("/v1/campaigns", json=campaign_body(seconds=2)).json()
    sign_in(page, stack, key_of(tenant))
    page.goto(f"{stack.s.api_url}/ui/campaigns/{created['id']}")
    expect(page.locator("#status")).to_have_text("created")
    page.get_by_label("Recipient list").fill(csv_lines(20) + "not-an-address,Nobody\n")
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("#upload-summary")).to_have_text(
        "20 recipients accepted, 0 duplicates, 1 bad row.")
    expect(page.locator("table.bad-rows")).to_contain_text("22")  # its line, with the reason
    page.get_by_role("button", name="Schedule").click()
    expect(page.get_by_role("status")).to_contain_text("campaign is scheduled")
    # no reload from here: the page's own polling moves the bar
    expect(page.locator("#percent")).to_have_text("100")
    expect(page.locator("#count-sent")).to_have_text("20")
    screenshot(page, "campaign")

    page.get_by_label("Address").fill("user7@example.org")
    page.get_by_role("button", name="Look up").click()
    expect(page.locator("#lookup-outcome")).to_have_text("sent")

    page.get_by_role("link", name="Campaigns").click()
    expect(page.locator("table")).to_contain_text(created["id"])

    page.get_by_role("link", name="Suppressions").click()
    page.locator("#s-email").fill("blocked@example.org")
    page.get_by_role("button", name="Suppress").click()
    expect(page.get_by_role("status")).to_contain_text("blocked@example.org is suppressed")
    page.locator("#q").fill("blocked@example.org")
    page.get_by_role("button", name="Search").click()
    page.get_by_role("button", name="Remove").click()
    expect(page.get_by_role("status")).to_contain_text("no longer suppressed")


def test_another_tenants_job_and_a_forged_post_are_refused_then_logout(stack, tenant, page):
    with make_client(stack) as other:
        theirs = other.post("/v1/jobs", json={
            "id": "their-job", "schedule": {"cron": "0 0 1 1 *"},
            "target": {"type": "webhook", "url": "http://127.0.0.1:9/hook"}}).json()
        sign_in(page, stack, key_of(tenant))
        page.goto(f"{stack.s.api_url}/ui/jobs/{theirs['id']}")
        expect(page.get_by_role("heading", name=f"job {theirs['id']} not found")).to_be_visible()

        mine = tenant.post("/v1/jobs", json={
            "id": "mine", "schedule": {"cron": "0 0 1 1 *"},
            "target": {"type": "webhook", "url": "http://127.0.0.1:9/hook"}}).json()
        # the session's cookie goes with these posts (the page's context), the token does not
        for form in ({}, {"csrf": "forged"}):
            answer = page.request.post(f"{stack.s.api_url}/ui/jobs/{mine['id']}/pause",
                                       form=form, max_redirects=0)
            assert answer.status == 403 and "CSRF" in answer.text()
        answer = page.request.post(f"{stack.s.api_url}/ui/jobs/{theirs['id']}/pause",
                                   form={"csrf": "forged"}, max_redirects=0)
        assert answer.status == 403
        assert tenant.get(f"/v1/jobs/{mine['id']}").json()["paused"] is False
        assert other.get(f"/v1/jobs/{theirs['id']}").json()["paused"] is False

        page.get_by_role("button", name="Log out").click()
        expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
        page.goto(f"{stack.s.api_url}/ui/jobs")
        expect(page).to_have_url(re.compile(r"/ui/login$"))


def test_the_operator_pages(stack, page):
    sign_in(page, stack, os.environ["CRONSTREAM_OPERATOR_KEY"])
    expect(page.get_by_role("heading", name="Consumer lag")).to_be_visible()
    expect(page.locator("table.lag")).to_contain_text("cronstream.")
    expect(page.locator("table.health")).to_contain_text("cronstream_assigned_partitions")
    page.reload()  # a second sample of the lag: the chart has a line to draw
    expect(page.locator("svg.lag-chart")).to_be_visible()
    page.get_by_role("link", name="Topology").click()
    expect(page.locator("svg.topology")).to_be_visible()
    expect(page.locator("svg.topology")).to_contain_text("cronstream.jobs")


def test_docs_render_offline(stack, page):
    """``/docs`` with every request off the stack's host refused, as on a machine without
    internet: Swagger UI's assets come from the API itself (Swagger UI 5 of the fastapi-offline package)."""
    host = urlparse(stack.s.api_url).hostname
    page.route("**/*", lambda route: route.continue_() if urlparse(route.request.url).hostname
               == host else route.abort())
    page.goto(f"{stack.s.api_url}/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("cronstream")
    expect(page.locator(".opblock-tag-section").first).to_be_visible()
