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
    parse,
    payload,
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
