"""SNS messages on ``POST /v1/feedback/sns``, the API's one route without a key (issue 40):
SignatureVersion 1 (SHA1, whose collisions are practical) is refused unless the operator allows
it, and a message accepted once is not written again by another API process of the home, or
by this one after a restart (the replay memory was per process). Judged from the SES feedback
topic: what was written to it."""

from __future__ import annotations

import json

import httpx

from stack import processes
from tests.integration.test_ses_feedback import signed_by_the_local_server, written


def post(stack, message: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{stack.s.api_url}/v1/feedback/sns", content=json.dumps(message),
                      headers={"content-type": "text/plain; charset=UTF-8"}, timeout=30)


def test_a_message_signed_with_sha1_is_refused_and_writes_nothing(stack, api):
    good = signed_by_the_local_server(stack, tenant=api.tenant)
    sha1 = httpx.post(f"{stack.s.ses_endpoint}/_local/sns/sign", timeout=10, json={
        "message": {k: v for k, v in good.items() if k not in ("Signature", "SignatureVersion")},
        "version": "1"}).json()
    assert sha1["SignatureVersion"] == "1"
    before = written(stack)
    answer = post(stack, sha1)
    assert answer.status_code == 400 and "SignatureVersion 1" in answer.text, answer.text
    assert written(stack) == before


def test_a_message_accepted_before_the_api_restarted_is_not_written_again(stack, api):
    good = signed_by_the_local_server(stack, tenant=api.tenant)
    before = written(stack)
    first = post(stack, good)
    assert first.status_code == 200 and first.json()["written"] == 1, first.text
    processes.stop(stack.pidfile("api"))
    stack.start_api()
    again = post(stack, good)  # SNS's retry, or a replay, reaching the restarted process
    assert again.status_code == 200 and again.json() == {"written": 0, "duplicate": True}
    assert written(stack) == before + 1
