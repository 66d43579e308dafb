"""Tenants and their API keys (``streams.adapters.tenants``)."""

import pytest

from streams.adapters import tenants


def test_tenant_keys_are_stored_hashed():
    record, key = tenants.new_tenant("acme")
    assert key.startswith("cs_") and len(key) > 40
    assert key not in str(record) and record["key_sha256"] == tenants.key_hash(key)
    with pytest.raises(ValueError):
        tenants.new_tenant("Bad Name!")


@pytest.mark.parametrize("name", ["cronstream", "cronstream-ops", "operator"])
def test_names_that_would_reach_cronstreams_own_topics_or_look_like_the_operator_are_reserved(name):
    # a Kafka target writes <tenant>.*: a tenant named cronstream could write cronstream.jobs
    with pytest.raises(ValueError, match="reserved"):
        tenants.new_tenant(name)


def test_a_sender_is_granted_by_address_or_by_exact_domain():
    acme = {"tenant": "acme", "senders": ["News@Acme.example", "mail.acme.example"]}
    assert tenants.sender_granted(acme, "news@acme.example")
    assert tenants.sender_granted(acme, "Acme News <news@ACME.example>")
    assert tenants.sender_granted(acme, "anyone@mail.acme.example")
    for other in ("ceo@acme.example", "x@sub.mail.acme.example", "acme.example", "", "news@"):
        assert not tenants.sender_granted(acme, other), other
    assert not tenants.sender_granted({"tenant": "old"}, "a@b.example"), "no grant: no mail"


def test_mail_is_refused_naming_the_field_for_an_identity_or_pool_not_granted():
    acme = {"tenant": "acme", "senders": ["acme.example"], "pools": ["vip"],
            "ip_pools": {"warm": {}}}
    assert tenants.mail_refused(acme, "a@acme.example", "vip") is None
    assert tenants.mail_refused(acme, "a@acme.example", "warm") is None
    assert tenants.mail_refused(acme, "a@acme.example", "default") is None
    assert tenants.mail_refused(acme, "a@other.example", "vip")[0] == "from"
    assert tenants.mail_refused(acme, "a@acme.example", "theirs")[0] == "ip_pool"
    assert tenants.mail_refused({}, "a@acme.example")[0] == "tenant"


def test_grants_are_checked_and_changed_keeping_the_key():
    record, _ = tenants.new_tenant("acme", senders=["acme.example"], pools=["vip"])
    for bad in ({"senders": ["not an address"]}, {"pools": ["bad pool!"]},
                {"pools": ["p" * 50]}):  # cronstream-acme_ppp... over SES's 64 characters
        with pytest.raises(ValueError):
            tenants.new_tenant("acme", **bad)
    changed = tenants.granted(record, grant_senders=["news@b.example"],
                              revoke_senders=["ACME.example"], grant_pools=["bulk"],
                              revoke_pools=["vip"], max_campaigns=5)
    assert changed["senders"] == ["news@b.example"] and changed["pools"] == ["bulk"]
    assert changed["max_campaigns"] == 5 and changed["key_sha256"] == record["key_sha256"]
    with pytest.raises(ValueError, match="not a tenant limit"):
        tenants.granted(record, key_sha256="x")


def test_configuration_set_names_read_back_one_way_only():
    from streams.adapters import ses

    # tenant acme's pool corp-x and tenant acme-corp's pool x were both cronstream-acme-corp-x
    assert ses.configuration_set("acme", "corp-x") != ses.configuration_set("acme-corp", "x")
    for tenant, pool in (("acme", "corp-x"), ("acme-corp", "x"), ("a", "b_c"), ("acme", None)):
        assert ses.configuration_set_owner(ses.configuration_set(tenant, pool)) == (tenant, pool)
    assert ses.configuration_set_owner("someone-elses") is None
    assert ses.configuration_set_owner("cronstream-acme_") is None


def test_a_text_leaves_only_from_an_origination_the_operator_granted():
    acme = {"tenant": "acme", "sms_originations": ["+18005550100", "AcmeDental"]}
    assert tenants.sms_refused(acme, "+18005550100") is None
    assert tenants.sms_refused(acme, "AcmeDental") is None
    field, why = tenants.sms_refused(acme, "+18005550199")
    assert field == "origination" and "not one of tenant acme's SMS originations" in why
    assert tenants.sms_refused(acme, "acmedental")[0] == "origination", "a sender id is exact"
    assert tenants.sms_refused({"tenant": "old"}, "+18005550100")[0] == "origination", \
        "a record from before the grants: no text"
    assert tenants.sms_refused(None, "+18005550100")[0] == "tenant"


def test_the_accounts_default_origination_is_its_own_grant_never_implied_by_another():
    """An origination left out lets AWS pick any of the shared account's identities (another
    tenant's number or sender id): a tenant granted its own number may not leave it out."""
    own = {"tenant": "acme", "sms_originations": ["+18005550100"]}
    field, why = tenants.sms_refused(own, None)
    assert field == "origination" and "+18005550100" in why and "account-default" in why
    assert tenants.sms_refused({"tenant": "acme", "sms_originations": []}, None) is not None
    trusted = {"tenant": "acme", "sms_originations": [tenants.SMS_ACCOUNT_DEFAULT]}
    assert tenants.sms_refused(trusted, None) is None
    assert tenants.sms_refused(trusted, "+18005550100") is not None, "the default is not a number"


def test_sms_originations_are_checked_normalised_granted_and_revoked():
    record, _ = tenants.new_tenant("acme", sms_originations=["+1 (800) 555-0100", "AcmeDental",
                                                              "+18005550100"])
    assert record["sms_originations"] == ["+18005550100", "AcmeDental"]
    for bad in ("Acme Dental Care", "18005550100", "default-of-the-account"):
        with pytest.raises(ValueError, match="sms origination"):
            tenants.new_tenant("acme", sms_originations=[bad])
    pool = "pool-" + "a" * 32
    changed = tenants.granted(record, grant_sms_originations=[pool, "account-default"],
                              revoke_sms_originations=["+1 800 555 0100"])
    assert changed["sms_originations"] == ["AcmeDental", pool, "account-default"]
    assert changed["senders"] == record["senders"] and changed["key_sha256"] == record["key_sha256"]
    assert tenants.granted({"tenant": "old", "senders": [], "pools": []},
                           revoke_sms_originations=["not even valid"])["sms_originations"] == []
    with pytest.raises(ValueError, match="sms origination"):
        tenants.granted(record, grant_sms_originations=["+0"])


def test_a_tenant_record_with_sms_originations_encodes():
    from streams.runtime.codec import codec

    record, _ = tenants.new_tenant("acme", sms_originations=["+18005550100"])
    assert codec().decode(codec().encode("Tenant", record))["sms_originations"] == ["+18005550100"]
