"""Campaign ids are the tenant's own (issue 40): a client-chosen id is stored as
``<tenant>_<id>``, so two tenants may both use one, a 409 names only the caller's own campaign,
and an id cannot be squatted; campaigns stored before the scoping keep their bare ids."""

from __future__ import annotations

from api.routes.campaigns import stored_campaign_id
from tests.unit.api.conftest import Api
from tests.unit.api.test_validation import campaign_body


def test_two_tenants_may_choose_the_same_campaign_id_and_each_sees_its_own(api: Api):
    acme, other = api.tenant("acme"), api.tenant("other")
    mine = api.client.post("/v1/campaigns", json={**campaign_body(), "id": "launch",
                                                   "name": "acme's"}, headers=acme)
    theirs = api.client.post("/v1/campaigns", json={**campaign_body(), "id": "launch",
                                                     "name": "other's"}, headers=other)
    assert (mine.status_code, theirs.status_code) == (201, 201), (mine.text, theirs.text)
    assert mine.json()["id"] == theirs.json()["id"] == "launch"
    assert api.client.get("/v1/campaigns/launch", headers=acme).json()["name"] == "acme's"
    assert api.client.get("/v1/campaigns/launch", headers=other).json()["name"] == "other's"
    keys = {key for topic, key, _ in api.emitter.sent if topic == "cronstream.campaigns"}
    assert keys == {"acme_launch", "other_launch"}
    again = api.client.post("/v1/campaigns", json={**campaign_body(), "id": "launch",
                                                    "name": "changed"}, headers=acme)
    assert again.status_code == 409 and "launch" in again.text


def test_a_campaign_stored_before_the_scoping_keeps_its_bare_id(api: Api):
    acme, other = api.tenant("acme"), api.tenant("other")
    created = api.client.post("/v1/campaigns", json=campaign_body(), headers=acme).json()
    legacy = {**api.state.campaigns.get(created["id"]), "campaign_id": "old-launch"}
    api.state.campaigns.put("old-launch", legacy)  # as the campaigns topic holds it
    assert api.client.get("/v1/campaigns/old-launch", headers=acme).json()["id"] == "old-launch"
    assert api.client.get("/v1/campaigns/old-launch", headers=other).status_code == 404
    # another tenant may now use that id: its own, stored apart, the old one untouched
    mine = api.client.post("/v1/campaigns", json={**campaign_body(), "id": "old-launch"},
                           headers=other)
    assert mine.status_code == 201 and api.state.campaigns.get("old-launch") == legacy
    # a bare id of before that spells another tenant's scoped key is never overwritten
    api.state.campaigns.put(stored_campaign_id("other", "x"), {**legacy, "campaign_id": "other_x"})
    taken = api.client.post("/v1/campaigns", json={**campaign_body(), "id": "x"}, headers=other)
    assert taken.status_code == 409 and "acme" not in taken.text
