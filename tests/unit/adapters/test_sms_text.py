"""Phone numbers and text bodies (``streams.adapters.sms_text``): E.164 as the API stores it,
and the encoding and message parts AWS's "SMS character limits" page gives."""

from __future__ import annotations

import pytest

from streams.adapters.sms_text import (
    MAX_PARTS,
    Encoding,
    check_body,
    encoding_of,
    is_e164,
    normalize_e164,
    size,
)


@pytest.mark.parametrize(("raw", "number"), [
    ("+15551234567", "+15551234567"),
    ("+1 (555) 123-4567", "+15551234567"),
    ("+44 20 7946 0958", "+442079460958"),
    ("+49.30.1234567", "+49301234567"),
    ("+12345678", "+12345678"),  # 8 digits: the shortest
    ("+123456789012345", "+123456789012345"),  # 15 digits: E.164's longest
])
def test_e164_numbers_are_normalised(raw, number):
    assert normalize_e164(raw) == number and is_e164(number)


@pytest.mark.parametrize("raw", [
    "15551234567",  # no +: a national number could be anyone's
    "0015551234567", "+05551234567",  # no 00 prefix; a country code never starts with 0
    "+1234567", "+1234567890123456",  # 7 and 16 digits
    "+1555abc4567", "+", "", "++15551234567", "+1555 123 4567 ext 9",
])
def test_anything_else_is_refused(raw):
    with pytest.raises(ValueError, match="E.164"):
        normalize_e164(raw)
    assert not is_e164(raw)


def test_gsm7_lengths_parts_of_160_then_153():
    assert size("a" * 160) == size("a" * 160).__class__(Encoding.GSM7, 160, 1)
    assert size("a" * 161).parts == 2 and size("a" * 306).parts == 2 and size("a" * 307).parts == 3
    assert size("").parts == 0


def test_gsm7_extension_characters_are_two_septets_and_never_split():
    assert encoding_of("price: 5€ [sale] {now} ^~|\\") is Encoding.GSM7
    assert size("€" * 80) == size("a" * 160).__class__(Encoding.GSM7, 160, 1)
    assert size("€" * 81).parts == 2
    # 152 septets then a 2-septet character: it opens the second part rather than split
    assert size("a" * 152 + "€" + "a" * 152).parts == 3
    assert size("a" * 151 + "€" + "a" * 153).parts == 2


def test_ucs2_lengths_parts_of_70_then_67_and_surrogates_count_twice():
    assert encoding_of("café ok") is Encoding.GSM7  # é is in GSM 03.38
    assert encoding_of("“quoted”") is Encoding.UCS2  # curly quotes are not
    assert size("ü" * 70).encoding is Encoding.GSM7
    assert size("ł" * 70) == size("ł").__class__(Encoding.UCS2, 70, 1)
    assert size("ł" * 71).parts == 2 and size("ł" * 134).parts == 2 and size("ł" * 135).parts == 3
    assert size("😀" * 35) == size("ł").__class__(Encoding.UCS2, 70, 1)
    assert size("ł" * 66 + "😀" + "ł" * 66).parts == 3  # the emoji does not straddle parts


def test_the_limit_is_ten_parts_in_either_encoding():
    assert MAX_PARTS == 10
    assert check_body("a" * 1530).parts == 10
    with pytest.raises(ValueError, match=r"11 SMS parts in GSM-7 \(1531 characters\); at most 10 "
                                         r"parts \(1530 characters"):
        check_body("a" * 1531)
    assert check_body("ł" * 670).parts == 10
    with pytest.raises(ValueError, match=r"UCS-2.*670 UTF-16 units in UCS-2.*outside the GSM"):
        check_body("ł" * 671)
    with pytest.raises(ValueError, match="blank"):
        check_body(" \n")


@pytest.mark.parametrize(("raw", "identity"), [
    ("+1 800 555 0100", "+18005550100"),
    ("pool-" + "a1" * 16, "pool-" + "a1" * 16),
    ("phone-" + "0f" * 16, "phone-" + "0f" * 16),
    ("senderid-" + "9e" * 16, "senderid-" + "9e" * 16),
    ("arn:aws:sms-voice:us-east-1:123456789012:pool/pool-" + "a1" * 16,
     "arn:aws:sms-voice:us-east-1:123456789012:pool/pool-" + "a1" * 16),
    ("arn:aws:sms-voice:eu-west-1:123456789012:sender-id/Acme/GB",
     "arn:aws:sms-voice:eu-west-1:123456789012:sender-id/Acme/GB"),
    ("AcmeDental", "AcmeDental"), ("Acme-1", "Acme-1"),
])
def test_origination_identities(raw, identity):
    from streams.adapters.sms_text import check_origination

    assert check_origination(raw) == identity


@pytest.mark.parametrize("raw", ["12345", "AcmeDentalCare", "Acme Dental", "pool-" + "a" * 40,
                                 "arn:aws:sns:us-east-1:123456789012:topic", "+0123", ""])
def test_origination_identities_refused(raw):
    from streams.adapters.sms_text import check_origination

    with pytest.raises(ValueError):
        check_origination(raw)
