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
