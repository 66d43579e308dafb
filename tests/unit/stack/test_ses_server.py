import asyncio
import json

import httpx

from stack.ses_server import create_app


async def _post(app, path: str, body: dict) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://ses.local") as client:
        return await client.post(path, json=body)


def test_an_entry_header_replaces_the_template_header_of_the_same_name(tmp_path):
    log = tmp_path / "sent.jsonl"
    response = asyncio.run(_post(create_app(log), "/v2/email/outbound-bulk-emails", {
            "FromEmailAddress": "news@example.com",
            "DefaultContent": {"Template": {
                "TemplateContent": {"Subject": "hi"},
                "Headers": [{"Name": "X-Kind", "Value": "template"},
                            {"Name": "List-Unsubscribe-Post",
                             "Value": "List-Unsubscribe=One-Click"}]}},
            "BulkEmailEntries": [
                {"Destination": {"ToAddresses": ["a@example.net"]},
                 "ReplacementHeaders": [{"Name": "X-Kind", "Value": "entry"}]},
                {"Destination": {"ToAddresses": ["b@example.net"]}},
            ]}))
    assert response.status_code == 200, response.text
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    assert [m["headers"]["X-Kind"] for m in sent] == ["entry", "template"]
    assert all(m["headers"]["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
               for m in sent)


def test_each_accepted_recipient_is_one_log_line_with_the_id_it_was_answered(tmp_path):
    log = tmp_path / "sent.jsonl"
    app = create_app(log)
    entries = [{"Destination": {"ToAddresses": [f"r{i}@example.net"]}} for i in range(3)]
    entries.insert(1, {"Destination": {"ToAddresses": ["x@example.net", "y@example.net"]}})
    answers = [asyncio.run(_post(app, "/v2/email/outbound-bulk-emails", {
        "FromEmailAddress": "news@example.com", "ConfigurationSetName": "cs",
        "DefaultContent": {"Template": {"TemplateContent": {"Subject": 'a "quoted" subject'}}},
        "BulkEmailEntries": entries})).json()["BulkEmailEntryResults"] for _ in range(2)]
    assert [r["Status"] for r in answers[0]] == ["SUCCESS", "INVALID_PARAMETER", "SUCCESS",
                                                 "SUCCESS"]
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    answered = [r["MessageId"] for answer in answers for r in answer if r["Status"] == "SUCCESS"]
    assert [m["message_id"] for m in sent] == answered and len(set(answered)) == 6
    assert [m["to"] for m in sent] == ["r0@example.net", "r1@example.net", "r2@example.net"] * 2
    assert {(m["from"], m["subject"], m["configuration_set"]) for m in sent} == {
        ("news@example.com", 'a "quoted" subject', "cs")}
    assert all(isinstance(m["at_ms"], int) and m["headers"] == {} for m in sent)


def test_the_call_log_tells_each_tagged_chunk_call_apart_with_its_answer(tmp_path):
    app = create_app(tmp_path / "sent.jsonl")
    body = {"FromEmailAddress": "news@example.com",
            "DefaultContent": {"Template": {"TemplateContent": {"Subject": "s"}}},
            "DefaultEmailTags": [{"Name": "cronstream-campaign", "Value": "c1"},
                                 {"Name": "cronstream-chunk", "Value": "u-7"}],
            "BulkEmailEntries": [{"Destination": {"ToAddresses": ["a@example.net"]}}]}

    async def calls() -> list[dict]:
        assert (await _post(app, "/_local/faults", {"throttle_ratio": 1.0})).status_code == 200
        assert (await _post(app, "/v2/email/outbound-bulk-emails", body)).status_code == 429
        assert (await _post(app, "/_local/faults", {})).status_code == 200
        assert (await _post(app, "/v2/email/outbound-bulk-emails", body)).status_code == 200
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ses.local") as client:
            assert (await client.get("/_local/calls", params={"campaign": "c2"})).json() == []
            return (await client.get("/_local/calls", params={"campaign": "c1"})).json()

    found = asyncio.run(calls())
    assert [(c["chunk"], c["outcome"]) for c in found] == [("u-7", "throttled"), ("u-7", "accepted")]
    assert all(c["arrived_ms"] <= c["answered_ms"] for c in found)


def test_a_call_under_an_older_region_epoch_than_one_seen_is_refused_and_not_logged(tmp_path):
    log = tmp_path / "sent.jsonl"
    app = create_app(log)

    def one(to: str, epoch: str | None) -> dict:
        tags = [{"Name": "cronstream-epoch", "Value": epoch}] if epoch else []
        return {"FromEmailAddress": "r@example.com", "Destination": {"ToAddresses": [to]},
                "Content": {"Simple": {"Subject": {"Data": "s"}, "Body": {"Text": {"Data": "t"}}}},
                "EmailTags": tags}

    async def calls() -> tuple[list[int], dict]:
        codes = [(await _post(app, "/v2/email/outbound-emails", one(to, epoch))).status_code
                 for to, epoch in (("a@x.net", "1"), ("b@x.net", "2"), ("c@x.net", "1"),
                                   ("d@x.net", None), ("e@x.net", "2"))]
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ses.local") as client:
            return codes, (await client.get("/_local/stats")).json()

    codes, stats = asyncio.run(calls())
    assert codes == [200, 200, 400, 200, 200]
    assert stats["stale_epoch"] == 1
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(m["to"], m["epoch"]) for m in sent] == [
        ("a@x.net", 1), ("b@x.net", 2), ("d@x.net", None), ("e@x.net", 2)]


def test_a_latency_fault_answers_every_call_that_much_later_and_many_at_once(tmp_path):
    """``latency_ms`` holds each answer (Amazon SES takes 50-100 ms): calls wait side by side,
    not one after another, so a sender's concurrency is what the fault exercises."""
    app = create_app(tmp_path / "sent.jsonl")
    body = {"FromEmailAddress": "news@example.com",
            "DefaultContent": {"Template": {"TemplateContent": {"Subject": "s"}}},
            "BulkEmailEntries": [{"Destination": {"ToAddresses": ["a@example.net"]}}]}

    async def timed() -> tuple[float, list[int]]:
        assert (await _post(app, "/_local/faults", {"latency_ms": 300})).status_code == 200
        loop = asyncio.get_running_loop()
        began = loop.time()
        answers = await asyncio.gather(*(
            _post(app, "/v2/email/outbound-bulk-emails", body) for _ in range(5)))
        return loop.time() - began, [a.status_code for a in answers]

    took, statuses = asyncio.run(timed())
    assert statuses == [200] * 5
    assert 0.3 <= took < 1.5, f"5 calls at 300 ms each, side by side: {took:.2f} s"


def test_a_fault_that_is_not_a_number_is_refused_naming_it_and_changes_nothing(tmp_path):
    app = create_app(tmp_path / "sent.jsonl")
    body = {"FromEmailAddress": "news@example.com",
            "DefaultContent": {"Template": {"TemplateContent": {"Subject": "s"}}},
            "BulkEmailEntries": [{"Destination": {"ToAddresses": ["a@example.net"]}}]}

    async def scenario() -> list[int]:
        assert (await _post(app, "/_local/faults", {"throttle_ratio": 1.0})).status_code == 200
        statuses = []
        for bad in ({"latency_ms": "fast"}, {"latency_ms": -5}, {"throttle_ratio": True}):
            answer = await _post(app, "/_local/faults", bad)
            statuses.append(answer.status_code)
            assert next(iter(bad)) in answer.text
        # the accepted fault still holds: every call throttled
        statuses.append((await _post(app, "/v2/email/outbound-bulk-emails", body)).status_code)
        return statuses

    assert asyncio.run(scenario()) == [400, 400, 400, 429]
