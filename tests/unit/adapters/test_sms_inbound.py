"""Inbound texts (``streams.adapters.sms_inbound``): AWS's two-way payload read and written in
one shape, and the opt-out and opt-in keywords."""

from __future__ import annotations

import json

import pytest

from streams.adapters.sms_inbound import (
    OPT_IN_KEYWORDS,
    OPT_OUT_KEYWORDS,
    InboundText,
    Intent,
    intent,
    is_inbound_text,
    parse,
    payload,
    tenants_of,
)

# AWS's example ("Example of a two-way SMS message payload for Amazon SNS topics")
AWS_EXAMPLE = ('{"originationNumber":"+14255550182","destinationNumber":"+12125550101",'
               '"messageKeyword":"JOIN","messageBody":"EXAMPLE",'
               '"inboundMessageId":"cae173d2-66b9-564c-8309-21f858e9fb84",'
               '"previousPublishedMessageId":"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}')


def test_awss_example_reads_from_our_side():
    assert parse(AWS_EXAMPLE) == InboundText(
        sender="+14255550182", number="+12125550101", body="EXAMPLE", keyword="JOIN",
        inbound_message_id="cae173d2-66b9-564c-8309-21f858e9fb84",
        previous_published_message_id="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")


def test_payload_is_the_inverse_of_parse():
    text = payload("+15551234567", "+18005550100", "STOP", "in-1")
    assert parse(text) == InboundText("+15551234567", "+18005550100", "STOP", None, "in-1", None)
    assert set(json.loads(text)) == {"originationNumber", "destinationNumber", "messageKeyword",
                                     "messageBody", "inboundMessageId"}


@pytest.mark.parametrize(("text", "problem"), [
    ("not json", "not JSON"), ("[1]", "not a JSON object"),
    ('{"destinationNumber":"+12125550101","messageBody":"x","inboundMessageId":"i"}',
     "without originationNumber"),
    ('{"originationNumber":"4255550182","destinationNumber":"+12125550101","messageBody":"x",'
     '"inboundMessageId":"i"}', "number: a phone number in E.164 form starts with +"),
    ('{"originationNumber":"+14255550182","destinationNumber":"+12125550101",'
     '"inboundMessageId":"i"}', "without messageBody"),
    ('{"originationNumber":"+14255550182","destinationNumber":"+12125550101","messageBody":"x"}',
     "without inboundMessageId"),
])
def test_a_malformed_message_is_refused_naming_the_problem(text, problem):
    with pytest.raises(ValueError, match=problem):
        parse(text)


def test_the_keyword_lists_are_awss_required_ones_and_start_unstop():
    assert {"ARRET", "CANCEL", "END", "OPT-OUT", "OPTOUT", "QUIT", "REMOVE", "STOP", "TD",
            "UNSUBSCRIBE"} <= OPT_OUT_KEYWORDS
    assert {"START", "UNSTOP"} == OPT_IN_KEYWORDS


@pytest.mark.parametrize("body", ["STOP", "stop", " Stop ", "STOP.", "stop please", "Quit!",
                                  "unsubscribe me", "opt-out", "End", "cancel", "STOPALL",
                                  "arret", "td"])
def test_an_opt_out_is_read_from_the_first_word(body):
    assert intent(body) is Intent.OPT_OUT


@pytest.mark.parametrize("body", ["START", "start", " Unstop. ", "START!"])
def test_an_opt_in_is_only_the_whole_body(body):
    assert intent(body) is Intent.OPT_IN


@pytest.mark.parametrize("body", ["please stop", "don't stop", "Start me up", "YES", "HELP",
                                  "stopwatch", "", "ok"])
def test_anything_else_means_nothing(body):
    assert intent(body) is Intent.NONE


def test_an_inbound_text_is_told_from_an_ses_event_by_its_inbound_message_id():
    assert is_inbound_text(AWS_EXAMPLE)
    assert not is_inbound_text('{"eventType": "Bounce", "mail": {"messageId": "m-1"}}')
    assert not is_inbound_text("not json") and not is_inbound_text("[1, 2]")
    assert is_inbound_text('{"inboundMessageId": "x"}'), "malformed: parse refuses it, naming why"


def test_an_opt_out_applies_to_the_pinned_tenant_else_to_every_tenant_granted_the_number():
    text = parse(payload("+15551234567", "+18005550100", "STOP", "in-1"))
    tenants = [{"tenant": "b", "sms_originations": ["+18005550100"]},
               {"tenant": "a", "sms_originations": ["+18005550199", "+18005550100"]},
               {"tenant": "c", "sms_originations": ["+18005550199"]},
               {"tenant": "d"}]
    assert tenants_of(text, None, tenants) == ["a", "b"]
    assert tenants_of(text, "c", tenants) == ["c"], "a pinned topic names its tenant"
    assert tenants_of(text, None, tenants[2:]) == [], "nobody's number: nobody's opt-out"
