"""SNS signature verification (``streams.adapters.sns``) on a key and certificate made here: no
network. Each refusal must name its problem, since it is what the 4xx tells the sender."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from functools import cache

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding

from streams.adapters import sns

TOPIC = "arn:aws:sns:us-east-1:123456789012:ses-events"
CERT_URL = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem"
NOW = datetime.now(UTC).replace(microsecond=0)  # the certificate made here is valid now
POLICY = sns.Policy(topics={TOPIC: "acme"})


@cache
def identity():
    return sns.new_identity("sns.us-east-1.amazonaws.com")


def stamp(at: datetime = NOW) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def notification(**changes) -> dict[str, str]:
    return {"Type": "Notification", "MessageId": "m-1", "TopicArn": TOPIC,
            "Subject": "Amazon SES Email Event Notification",
            "Message": json.dumps({"eventType": "Delivery"}), "Timestamp": stamp(),
            "SigningCertURL": CERT_URL, "UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/x",
            **changes}


def confirmation(kind: str = "SubscriptionConfirmation") -> dict[str, str]:
    return {"Type": kind, "MessageId": "m-2", "TopicArn": TOPIC, "Token": "tok",
            "Message": "You have chosen to subscribe", "Timestamp": stamp(),
            "SubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription",
            "SigningCertURL": CERT_URL}


def check(message: dict[str, str], policy: sns.Policy = POLICY) -> None:
    """What the route does before it writes: parse, topic, age, URL, signature."""
    parsed = sns.parse(json.dumps(message).encode())
    sns.check_topic(parsed, policy)
    sns.check_age(parsed, NOW.timestamp(), policy)
    sns.check_url(parsed["SigningCertURL"], policy, "SigningCertURL")
    sns.verify(parsed, sns.public_key(identity()[1], NOW.timestamp()))


def refused(message: dict[str, str], status: int, says: str,
            policy: sns.Policy = POLICY) -> None:
    with pytest.raises(sns.Rejected) as caught:
        check(message, policy)
    assert caught.value.status == status
    assert says in caught.value.problem, caught.value.problem


def test_the_canonical_string_is_awss_field_order():
    assert sns.canonical(notification()) == (
        f"Message\n{notification()['Message']}\nMessageId\nm-1\n"
        f"Subject\nAmazon SES Email Event Notification\nTimestamp\n{stamp()}\n"
        f"TopicArn\n{TOPIC}\nType\nNotification\n").encode()
    without_subject = {k: v for k, v in notification().items() if k != "Subject"}
    assert b"Subject" not in sns.canonical(without_subject)
    assert sns.canonical(confirmation()).decode().split("\n")[::2] == [
        "Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type", ""]


@pytest.mark.parametrize("version", ["1", "2"])
def test_a_good_signature_of_either_version_is_accepted(version):
    key, _ = identity()
    check(sns.sign(notification(), key, version))
    check(sns.sign(confirmation(), key, version))
    check(sns.sign(confirmation("UnsubscribeConfirmation"), key, version))


def test_version_1_is_sha1_and_2_is_sha256():
    """Signed by hand, not by ``sign``: the two must not both be right by the same mistake."""
    key, _ = identity()
    for version, algorithm in (("1", hashes.SHA1()), ("2", hashes.SHA256())):
        message = {**notification(), "SignatureVersion": version}
        raw = key.sign(sns.canonical(message), padding.PKCS1v15(), algorithm)
        check({**message, "Signature": base64.b64encode(raw).decode()})
        other = "2" if version == "1" else "1"
        refused({**message, "SignatureVersion": other,
                 "Signature": base64.b64encode(raw).decode()}, 403, "bad signature")


@pytest.mark.parametrize("field", ["Message", "MessageId", "Subject", "Timestamp", "TopicArn"])
def test_a_tampered_signed_field_is_refused(field):
    signed = sns.sign(notification(), identity()[0])
    value = signed[field]
    tampered = stamp(NOW - timedelta(seconds=1)) if field == "Timestamp" else (
        "arn:aws:sns:us-east-1:123456789012:other" if field == "TopicArn" else value + "x")
    policy = sns.Policy(topics={TOPIC: "acme", "arn:aws:sns:us-east-1:123456789012:other": None})
    refused({**signed, field: tampered}, 403, "bad signature", policy)


def test_a_signature_by_another_key_is_refused():
    other_key, _ = sns.new_identity("attacker")
    refused(sns.sign(notification(), other_key), 403, "bad signature")


def test_an_unsigned_or_unknown_message_is_refused_naming_what_is_missing():
    signed = sns.sign(notification(), identity()[0])
    refused({k: v for k, v in signed.items() if k != "Signature"}, 400,
            "unsigned message: Signature is missing")
    refused({**signed, "SignatureVersion": "3"}, 400, "unknown SignatureVersion '3'")
    refused({**signed, "Type": "Surprise"}, 400, "unknown SNS message Type 'Surprise'")
    refused({**signed, "Type": {}}, 400, "unknown SNS message Type")  # unhashable: was a 500
    refused({**signed, "Signature": "%%%"}, 403, "not base64")
    with pytest.raises(sns.Rejected, match="not a JSON SNS message"):
        sns.parse(b"[1]")


@pytest.mark.parametrize(("url", "says"), [
    ("https://sns.us-east-1.amazonaws.com.evil.example/c.pem", "not an allowed SNS host"),
    ("https://sns.s3-external-1.amazonaws.com/c.pem", "not an allowed SNS host"),
    ("https://evil.example/sns.us-east-1.amazonaws.com/c.pem", "not an allowed SNS host"),
    ("https://sns.us-east-1.amazonaws.com:8443/c.pem", "not an allowed SNS host"),
    ("http://sns.us-east-1.amazonaws.com/c.pem", "is not https"),
    ("https://user@sns.us-east-1.amazonaws.com/c.pem", "not a plain host URL"),
])
def test_a_certificate_off_the_allowed_hosts_is_refused_before_any_fetch(url, says):
    refused(sns.sign(notification(SigningCertURL=url), identity()[0]), 403, says)


def test_the_allowed_hosts_are_awss_regions_unless_the_operator_says_otherwise():
    for host in ("sns.us-east-1.amazonaws.com", "sns.us-gov-west-1.amazonaws.com",
                 "sns.cn-north-1.amazonaws.com.cn", "sns.ap-southeast-2.amazonaws.com"):
        assert sns.check_url(f"https://{host}/c.pem", POLICY, "SigningCertURL")
    local = sns.Policy(topics={}, cert_hosts=(r"127\.0\.0\.1:28025",), allow_http=True)
    assert sns.check_url("http://127.0.0.1:28025/c.pem", local, "SigningCertURL")
    with pytest.raises(sns.Rejected):
        sns.check_url("http://127.0.0.1:28026/c.pem", local, "SigningCertURL")


def test_an_expired_or_future_message_is_refused():
    key = identity()[0]
    refused(sns.sign(notification(Timestamp=stamp(NOW - timedelta(seconds=3901))), key), 403,
            "expired")
    check(sns.sign(notification(Timestamp=stamp(NOW - timedelta(seconds=3800))), key))
    refused(sns.sign(notification(Timestamp=stamp(NOW + timedelta(minutes=10))), key), 403,
            "in the future")
    refused(sns.sign(notification(Timestamp="yesterday"), key), 400, "not ISO 8601")


def test_a_topic_not_configured_is_refused():
    refused(sns.sign(notification(TopicArn="arn:aws:sns:us-east-1:1:x"), identity()[0]), 403,
            "is not a configured SNS topic")


def test_a_certificate_not_valid_now_is_refused():
    with pytest.raises(sns.Rejected, match="not valid now"):
        sns.public_key(identity()[1], (NOW + timedelta(days=4000)).timestamp())
    with pytest.raises(sns.Rejected, match="not a PEM certificate"):
        sns.public_key(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", 0)


def test_seen_messages_forget_by_age_and_by_capacity():
    seen = sns.SeenMessages(max_age_s=100, capacity=3)
    seen.add("a", timestamp_s=0, now_s=0)
    seen.add("b", timestamp_s=50, now_s=50)
    assert "a" in seen and "b" in seen
    seen.add("c", timestamp_s=101, now_s=101)  # a's window ended at 100
    assert "a" not in seen and "b" in seen and "c" in seen
    seen.add("d", timestamp_s=102, now_s=102)
    seen.add("e", timestamp_s=103, now_s=103)  # over capacity: the oldest, b, goes early
    assert "b" not in seen and len(seen) == 3
