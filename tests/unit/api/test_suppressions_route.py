"""``/v1/suppressions`` read back (no broker): an opt-out written through the API answers at
once, one written by the SES feedback agent once the view has read it (here: put in the store
as the view would), with its reason and SES ids; another tenant's is a 404."""

from __future__ import annotations

from streams.campaigns import suppressions
from streams.runtime.codec import codec
from streams.topology import SUPPRESSIONS


def test_suppressions_read_back_with_their_reason_and_feedback_ids(api):
    acme, other = api.tenant("acme"), api.tenant("other")
    answer = api.client.post("/v1/suppressions", json={"email": "A@Example.org"}, headers=acme)
    assert answer.status_code == 201
    topic, key, value = api.emitter.sent[-1]
    assert (topic, key) == (SUPPRESSIONS.name, "acme:a@example.org")
    assert codec().decode(value)["source"] == "api"
    got = api.client.get("/v1/suppressions/a@example.org", headers=acme).json()
    assert (got["reason"], got["source"], got["feedback_id"]) == ("requested", "api", None)
    bounced = suppressions.record("acme", "b@example.org", "bounce", "feedback",
                                  feedback_id="fb-1", ses_message_id="m-1", created_ms=0)
    api.state.suppressions.put("acme:b@example.org", bounced)
    got = api.client.get("/v1/suppressions/B@example.org", headers=acme).json()
    assert (got["reason"], got["source"], got["feedback_id"], got["ses_message_id"]) == (
        "bounce", "feedback", "fb-1", "m-1")
    page = api.client.get("/v1/suppressions?limit=1", headers=acme).json()
    assert [i["email"] for i in page["items"]] == ["a@example.org"]
    rest = api.client.get(f"/v1/suppressions?limit=1&cursor={page['next_cursor']}",
                          headers=acme).json()
    assert [i["email"] for i in rest["items"]] == ["b@example.org"]
    assert api.client.get("/v1/suppressions/b@example.org", headers=other).status_code == 404
    assert api.client.get("/v1/suppressions", headers=other).json()["items"] == []
    assert api.client.delete("/v1/suppressions/b@example.org", headers=acme).status_code == 204
    assert api.client.get("/v1/suppressions/b@example.org", headers=acme).status_code == 404


def test_a_phone_number_is_suppressed_as_an_address_is_and_bad_input_names_its_field(api):
    acme = api.tenant("acme")
    answer = api.client.post("/v1/suppressions", json={"phone": "+1 (555) 123-4567"},
                             headers=acme)
    assert answer.status_code == 201 and answer.json()["phone"] == "+15551234567", answer.text
    topic, key, _ = api.emitter.sent[-1]
    assert (topic, key) == (SUPPRESSIONS.name, "acme:+15551234567")
    got = api.client.get("/v1/suppressions/+15551234567", headers=acme).json()
    assert (got["phone"], got["source"]) == ("+15551234567", "api")
    for body, field in (({"phone": "5551234567"}, "phone"), ({"email": "nobody"}, "email"),
                        ({"email": "a@example.org", "phone": "+15551234567"}, "email"),
                        ({}, "email")):
        refused = api.client.post("/v1/suppressions", json=body, headers=acme)
        assert refused.status_code == 422 and field in refused.text, (body, refused.text)
    assert api.client.get("/v1/suppressions/+1", headers=acme).status_code == 422
    assert api.client.delete("/v1/suppressions/+15551234567", headers=acme).status_code == 204
    assert api.client.get("/v1/suppressions/+15551234567", headers=acme).status_code == 404


def test_ugly_phone_numbers_are_422s_and_another_tenants_number_is_theirs(api):
    acme, other = api.tenant("acme"), api.tenant("other")
    for ugly in ("+", "+0155512345", "+1" + "5" * 20, "+１５５５１２３４５６７", "+15551234567\nX",
                 "+1555abc4567", "+" + "1" * 40, "+1 555 123 4567 ext 9"):
        answer = api.client.post("/v1/suppressions", json={"phone": ugly}, headers=acme)
        assert answer.status_code == 422 and "phone" in answer.text, (ugly, answer.text)
    assert api.emitter.sent == [], "nothing written for a refused number"
    assert api.client.post("/v1/suppressions", json={"phone": "+15551234567"},
                           headers=acme).status_code == 201
    assert api.client.get("/v1/suppressions/+15551234567", headers=other).status_code == 404
    assert api.client.get("/v1/suppressions/+15551234567").status_code == 401, "no key"
