"""What a text message is, before it is sent: an E.164 phone number, and a body's encoding and
size in message parts (issue 45). Pure: the API validates a job's ``sms`` target with it at
creation (a 422 naming ``target.to`` or ``target.body``), and the executor may re-check a
target written before a rule changed, with the same answers.

Why the API checks the size and does not leave it to AWS: End User Messaging SMS bills and
paces per *message part* (its MPS limits count parts), and its ``TextMessageBody`` takes up to
1,600 characters whatever the encoding (the service model in botocore), so a 1,600-character
body of emoji would be 24 parts billed and paced for one reminder. A body over ``MAX_PARTS`` is
refused when the job is made, not found out at 3 a.m. when it fires.

The arithmetic is AWS's, "SMS character limits" (AWS End User Messaging SMS User Guide,
https://docs.aws.amazon.com/sms-voice/latest/userguide/sms-limitations-character.html): a body
of GSM 03.38 characters only is sent in the GSM 7-bit alphabet, 160 characters in one part and
153 a part once split (each part carries a header); a body with any other character is sent in
UCS-2, 70 characters in one part and 67 a part once split. Two details the guide leaves out,
from GSM 03.38 / 3GPP TS 23.038 itself: the extension table's characters (``^{}\\[~]|€`` and
form feed) take two septets (an escape and the character), and a part is never split between
the two; in UCS-2 a character outside the Basic Multilingual Plane (most emoji) is two UTF-16
units, and a part is never split between those either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

# E.164: "+", a country code that never starts with 0, at most 15 digits in all (ITU-T E.164
# §6.1); 8 is the shortest number in use we accept (a 1-3 digit country code and a short
# subscriber number). AWS's own PhoneNumber shape is looser (``\+?[1-9][0-9]{1,18}``).
E164 = re.compile(r"\+[1-9][0-9]{7,14}")
# what people write inside a number and a reader drops: spaces, dashes, dots, parentheses
NUMBER_SEPARATORS = re.compile(r"[\s\-.()]")

# GSM 03.38's basic table (one septet each; the escape 0x1B itself is not a character of text)
GSM7_BASIC = frozenset(
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?"
    "¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà")
# its extension table: an escape septet and the character's, two septets each
GSM7_EXTENSION = frozenset("^{}\\[~]|€\f")

GSM7_SINGLE, GSM7_PART = 160, 153  # septets in a lone message, in each part of a split one
UCS2_SINGLE, UCS2_PART = 70, 67  # UTF-16 code units, likewise
# The most parts a reminder may take: 10 parts is 1,530 GSM-7 or 670 UCS-2 characters. Why 10:
# it stays inside AWS's 1,600-character TextMessageBody for every GSM-7 body, devices and
# carriers reassemble long concatenated messages unreliably beyond about that (the UDH allows
# 255), and it caps one reminder's cost and MPS share at 10 parts.
MAX_PARTS = 10
# what AWS's TextMessageBody takes (characters, whatever the encoding): the API's outer bound
MAX_BODY_CHARACTERS = 1600


class Encoding(Enum):
    GSM7 = "GSM-7"
    UCS2 = "UCS-2"


@dataclass(frozen=True)
class BodySize:
    """How a body goes out: its encoding, its length in that encoding's units (septets or
    UTF-16 code units) and the message parts it takes."""

    encoding: Encoding
    units: int
    parts: int


def normalize_e164(raw: str) -> str:
    """``raw`` as the E.164 number it names (``+15551234567``), spaces, dashes, dots and
    parentheses dropped; ValueError naming the problem otherwise. No ``00`` or national
    prefixes are guessed: a number without its country code could be anyone's."""
    number = NUMBER_SEPARATORS.sub("", raw)
    if not number.startswith("+"):
        raise ValueError("a phone number in E.164 form starts with + and its country code "
                         "(e.g. +15551234567)")
    if not E164.fullmatch(number):
        raise ValueError("a phone number in E.164 form is + then 8 to 15 digits, the first "
                         "not 0 (e.g. +15551234567)")
    return number


def is_e164(text: str) -> bool:
    """``text`` is already an E.164 number as ``normalize_e164`` writes it."""
    return E164.fullmatch(text) is not None


def _septets(char: str) -> int | None:
    if char in GSM7_BASIC:
        return 1
    if char in GSM7_EXTENSION:
        return 2
    return None


def encoding_of(body: str) -> Encoding:
    """GSM-7 if every character is in GSM 03.38 (either table), else UCS-2: what AWS picks."""
    return Encoding.GSM7 if all(_septets(c) is not None for c in body) else Encoding.UCS2


def _parts(costs: list[int], single: int, part: int) -> int:
    """Parts for characters of these costs (units each), a character never split."""
    total = sum(costs)
    if total <= single:
        return 1 if total else 0
    parts, used = 1, 0
    for cost in costs:
        if used + cost > part:
            parts, used = parts + 1, 0
        used += cost
    return parts


def size(body: str) -> BodySize:
    """The encoding, units and message parts of ``body``."""
    if encoding_of(body) is Encoding.GSM7:
        costs = [_septets(c) or 0 for c in body]
        return BodySize(Encoding.GSM7, sum(costs), _parts(costs, GSM7_SINGLE, GSM7_PART))
    costs = [2 if ord(c) > 0xFFFF else 1 for c in body]
    return BodySize(Encoding.UCS2, sum(costs), _parts(costs, UCS2_SINGLE, UCS2_PART))


def check_body(body: str, max_parts: int = MAX_PARTS) -> BodySize:
    """``body``'s size if it may be sent: not blank and at most ``max_parts`` parts; else a
    ValueError that says how long it is and what the limit is in its encoding."""
    if not body.strip():
        raise ValueError("a text message's body must not be blank")
    found = size(body)
    if found.parts > max_parts:
        per_part = GSM7_PART if found.encoding is Encoding.GSM7 else UCS2_PART
        unit = "characters" if found.encoding is Encoding.GSM7 else "UTF-16 units"
        raise ValueError(
            f"the body is {found.parts} SMS parts in {found.encoding.value} ({found.units} "
            f"{unit}); at most {max_parts} parts ({max_parts * per_part} {unit} in "
            f"{found.encoding.value}) are allowed"
            + ("" if found.encoding is Encoding.GSM7 else
               ": a character outside the GSM 03.38 alphabet (an emoji, a curly quote) makes "
               "the whole body UCS-2"))
    return found


# An origination identity, as SendTextMessage takes it: an E.164 phone number, the id of a
# phone number, pool or sender id resource, an ARN of one, or a sender id itself (an
# alphanumeric "from" of 1 to 11 characters with a letter, where the country allows one).
RESOURCE_ID = re.compile(r"(phone|pool|senderid)-[0-9a-f]{32}")
RESOURCE_ARN = re.compile(r"arn:aws[a-z-]*:sms-voice:[a-z0-9-]+:\d{12}:"
                          r"(phone-number|pool|sender-id)/[A-Za-z0-9_/+-]{1,200}")
SENDER_ID = re.compile(r"(?=.*[A-Za-z])[A-Za-z0-9-]{1,11}")


def check_origination(text: str) -> str:
    """``text`` as an origination identity (a phone number normalised to E.164), or a
    ValueError listing what one may be. Why check what AWS will check again: a typo found when
    the job is made is a 422; found at fire time, a reminder not sent."""
    if text.lstrip().startswith("+"):
        return normalize_e164(text)
    if RESOURCE_ID.fullmatch(text) or RESOURCE_ARN.fullmatch(text) or SENDER_ID.fullmatch(text):
        return text
    raise ValueError("origination must be an E.164 phone number, a phone number, pool or sender "
                     "id (phone-…, pool-…, senderid-… and 32 hex digits), an End User Messaging "
                     "SMS ARN of one, or a sender id of 1 to 11 letters, digits and dashes")
