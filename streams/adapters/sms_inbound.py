"""Inbound text messages (two-way SMS) and what their keywords mean: how a recipient's "STOP"
reaches cronstream and becomes an opt-out (issue 45). Pure: the API's SNS intake parses the
notification's ``Message`` with ``parse``, and ``intent`` says whether it suppresses the number,
lifts its suppression or means nothing to us.

The message, as AWS End User Messaging SMS publishes it to the SNS topic of a number's two-way
channel ("Example of a two-way SMS message payload for Amazon SNS topics",
https://docs.aws.amazon.com/sms-voice/latest/userguide/two-way-sms-payload.html), a JSON object:
``originationNumber`` (the customer's phone, who sent it), ``destinationNumber`` (our number it
was sent to), ``messageKeyword`` (the registered keyword of our number it matched, if any),
``messageBody``, ``inboundMessageId`` (unique per inbound message: the dedupe key), and
``previousPublishedMessageId`` (the message it answers). Note the names are from the inbound
message's point of view: ``originationNumber`` is the *recipient* of our texts.

The keywords: AWS's required opt-out keywords ("Required opt-out keywords",
https://docs.aws.amazon.com/sms-voice/latest/userguide/keywords-required.html): ARRET, CANCEL,
END, OPT-OUT, OPTOUT, QUIT, REMOVE, STOP, TD, UNSUBSCRIBE; and STOPALL, which CTIA's handbook and
the big providers also honour. Opting back in: START and UNSTOP, the keywords AWS documents for
resubscribing on the same page (toll-free numbers). YES is not one: a "Reply YES to confirm"
reminder would make it an opt-in by accident.

How a body matches, and why the two directions differ: AWS answers a message "that begins with a
keyword" (case-insensitive), so an opt-out is read from the *first word* ("Stop please", "stop.")
— a missed opt-out is a compliance failure and a complaint; an opt-in only from a body that is
*exactly* the keyword, since lifting a suppression on a stray "start" in a sentence would text
someone who said stop.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from streams.adapters.sms_text import normalize_e164

OPT_OUT_KEYWORDS = frozenset({"ARRET", "CANCEL", "END", "OPT-OUT", "OPTOUT", "QUIT", "REMOVE",
                              "STOP", "STOPALL", "TD", "UNSUBSCRIBE"})
OPT_IN_KEYWORDS = frozenset({"START", "UNSTOP"})
# the first word of a body: letters, digits and dashes (OPT-OUT), whatever punctuation follows
FIRST_WORD = re.compile(r"\s*([A-Za-z0-9-]+)")
TRAILING_PUNCTUATION = ".!"
MAX_BODY = 1600  # what we read of a body: the longest text AWS accepts (TextMessageBody)


class Intent(Enum):
    OPT_OUT = "opt_out"  # suppress the sender's number for the tenant
    OPT_IN = "opt_in"  # lift that suppression
    NONE = "none"  # any other message: nothing to do (HELP is AWS's to answer)


@dataclass(frozen=True)
class InboundText:
    """One inbound text, named from cronstream's side: ``sender`` is the phone that wrote (the
    recipient of our texts, AWS's ``originationNumber``), ``number`` ours that it wrote to
    (``destinationNumber``: an origination identity of a tenant)."""

    sender: str
    number: str
    body: str
    keyword: str | None
    inbound_message_id: str
    previous_published_message_id: str | None


def intent(body: str) -> Intent:
    """What a body means for the sender's suppression (module docstring: first word for an
    opt-out, the whole body for an opt-in)."""
    text = body.strip().rstrip(TRAILING_PUNCTUATION).strip().upper()
    if text in OPT_IN_KEYWORDS:
        return Intent.OPT_IN
    first = FIRST_WORD.match(body)
    if first is not None and first.group(1).upper() in OPT_OUT_KEYWORDS:
        return Intent.OPT_OUT
    return Intent.NONE


def _required(message: dict[str, object], name: str) -> str:
    value = message.get(name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"an inbound text message without {name}")
    return value


def _optional(message: dict[str, object], name: str) -> str | None:
    value = message.get(name)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"an inbound text message's {name} is not a string")
    return value or None


def parse(text: str) -> InboundText:
    """An SNS notification's ``Message`` of a two-way SMS channel as an ``InboundText``;
    ValueError naming what is missing or malformed (the intake answers 400 and writes nothing).
    Both numbers are checked as E.164, so a suppression is keyed exactly as the API's."""
    try:
        message = json.loads(text)
    except ValueError as exc:
        raise ValueError("an inbound text message is not JSON") from exc
    if not isinstance(message, dict):
        raise ValueError("an inbound text message is not a JSON object")
    sender, number = _required(message, "originationNumber"), _required(message, "destinationNumber")
    try:
        sender, number = normalize_e164(sender), normalize_e164(number)
    except ValueError as exc:
        raise ValueError(f"an inbound text message's number: {exc}") from exc
    body = message.get("messageBody")
    if not isinstance(body, str):
        raise ValueError("an inbound text message without messageBody")
    return InboundText(sender=sender, number=number, body=body[:MAX_BODY],
                       keyword=_optional(message, "messageKeyword"),
                       inbound_message_id=_required(message, "inboundMessageId"),
                       previous_published_message_id=_optional(message,
                                                               "previousPublishedMessageId"))


def is_inbound_text(text: str) -> bool:
    """Whether an SNS notification's ``Message`` is an inbound text (the intake's switch: one
    endpoint takes SES's events and the numbers' two-way messages, as one SNS topic can carry
    either). An inbound text is the only message with an ``inboundMessageId``; a malformed one
    is then refused by ``parse`` naming what is wrong, never read as an SES event."""
    try:
        message = json.loads(text)
    except ValueError:
        return False
    return isinstance(message, dict) and "inboundMessageId" in message


def tenants_of(text: InboundText, pinned: str | None,
               tenants: Iterable[Mapping[str, Any]]) -> list[str]:
    """The tenants an opt-out (or opt-in) applies to: the tenant the topic is pinned to
    (``CRONSTREAM_SNS_TOPICS`` ``ARN=TENANT``), else every tenant the operator granted the number
    that was written to (``sms_originations``): the number is what the phone's owner texted
    STOP to, and a number shared by two tenants sent them texts from both."""
    if pinned is not None:
        return [pinned]
    return sorted(str(t["tenant"]) for t in tenants
                  if text.number in (t.get("sms_originations") or ()))


def payload(sender: str, number: str, body: str, inbound_message_id: str,
            keyword: str | None = None, previous_published_message_id: str | None = None) -> str:
    """The ``Message`` AWS publishes for an inbound text (the inverse of ``parse``): what the
    local SMS server sends, so the server and the intake share one shape."""
    message: dict[str, str] = {"originationNumber": sender, "destinationNumber": number,
                               "messageKeyword": keyword or "", "messageBody": body,
                               "inboundMessageId": inbound_message_id}
    if previous_published_message_id:
        message["previousPublishedMessageId"] = previous_published_message_id
    return json.dumps(message)
