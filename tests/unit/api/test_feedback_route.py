"""``POST /v1/feedback/sns`` in-process: what it writes for an authentic message, and that every
refusal (unsigned, forged, wrong topic, expired, a certificate off the allowed hosts) is a 4xx
naming the problem that writes nothing; a redelivery writes nothing again. The certificate is
"fetched" from the test, the signing key made here."""

from __future__ import annotations

import json
from functools import cache

import pytest

from api.routes.feedback import Intake
from streams.adapters import sms_inbound, sns
from streams.runtime.codec import codec
from streams.topology import SES_FEEDBACK, SUPPRESSIONS
from tests.unit.adapters.test_sns import CERT_URL, TOPIC, identity, stamp
from tests.unit.api.conftest import Api
from tests.unit.campaigns.test_ses_events import EVENTS

PATH = "/v1/feedback/sns"


class Fetcher:
    def __init__(self) -> None:
        self.urls: list[str] = []

    async def __call__(self, url: str) -> bytes:
        self.urls.append(url)
        return identity()[1] if url == CERT_URL else b"<ConfirmSubscriptionResponse/>"


@cache
def other_key():
    return sns.new_identity("forger")[0]


@pytest.fixture
def intake(api: Api) -> Fetcher:
    fetch = Fetcher()
    policy = sns.Policy(topics={TOPIC: None})
    api.client.app.state.sns_intake = Intake(policy, fetch=fetch)
    return fetch


def message(event: str = "Bounce", message_id: str = "sns-m-1", **changes) -> dict[str, str]:
    base = {"Type": "Notification", "MessageId": message_id, "TopicArn": TOPIC,
            "Message": json.dumps(EVENTS[event]), "Timestamp": stamp(),
            "SigningCertURL": CERT_URL}
    return sns.sign({**base, **changes}, identity()[0])


def post(api: Api, body: dict, **headers: str):
    # SNS's own content type: JSON sent as text/plain
    return api.client.post(PATH, content=json.dumps(body).encode(),
                           headers={"content-type": "text/plain; charset=UTF-8", **headers})


def test_an_authentic_notification_writes_one_record_per_recipient(api: Api, intake):
    api.tenant("acme")
    answer = post(api, message("Delivery"), **{"x-amz-sns-message-type": "Notification"})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"written": 2, "event_type": "Delivery"}
    assert [(t, k) for t, k, _ in api.emitter.sent] == [
        (SES_FEEDBACK.name, "acme:a@example.org"), (SES_FEEDBACK.name, "acme:b@example.org")]
    record = codec().decode(api.emitter.sent[0][2])
    assert (record["tenant"], record["sns_message_id"], record["sns_topic_arn"]) == (
        "acme", "sns-m-1", TOPIC)
    assert intake.urls == [CERT_URL]
    post(api, message("Delivery", message_id="sns-m-2"))
    assert intake.urls == [CERT_URL], "the certificate is cached"


def test_a_redelivery_writes_nothing_again(api: Api, intake):
    api.tenant("acme")
    first = message("Bounce")
    assert post(api, first).json()["written"] == 1
    again = post(api, first)
    assert again.status_code == 200 and again.json() == {"written": 0, "duplicate": True}
    assert len(api.emitter.sent) == 1


@pytest.mark.parametrize(("body", "status", "says"), [
    ({**message(), "Signature": ""}, 400, "unsigned message: Signature is missing"),
    ({k: v for k, v in message().items() if k != "Signature"}, 400, "Signature is missing"),
    (sns.sign({k: v for k, v in message().items() if k != "Signature"}, other_key()), 403,
     "bad signature"),
    ({**message(), "Message": json.dumps(EVENTS["Complaint"])}, 403, "bad signature"),
    (message(TopicArn="arn:aws:sns:us-east-1:123456789012:elsewhere"), 403,
     "is not a configured SNS topic"),
    (message(Timestamp="2020-01-01T00:00:00.000Z"), 403, "expired"),
    (message(SigningCertURL="https://evil.example/cert.pem"), 403, "not an allowed SNS host"),
    ({**message(), "Type": "Surprise"}, 400, "unknown SNS message Type"),
])
def test_a_refused_message_is_a_4xx_naming_the_problem_and_writes_nothing(
        api: Api, intake, body, status, says):
    api.tenant("acme")
    answer = post(api, body)
    assert answer.status_code == status, answer.text
    assert says in answer.json()["detail"][0]["msg"]
    assert api.emitter.sent == []
    assert intake.urls in ([], [CERT_URL]), "nothing fetched but the allowed certificate"


def test_a_mismatched_message_type_header_and_a_non_json_body_are_refused(api: Api, intake):
    assert post(api, message(), **{"x-amz-sns-message-type": "SubscriptionConfirmation"}
                ).status_code == 400
    assert api.client.post(PATH, content=b"\xff not json").status_code == 400
    assert api.emitter.sent == []


def test_a_subscription_is_confirmed_by_fetching_its_url_and_writes_nothing(api: Api, intake):
    subscribe = "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&Token=t"
    confirmation = sns.sign({"Type": "SubscriptionConfirmation", "MessageId": "c-1", "Token": "t",
                             "TopicArn": TOPIC, "Message": "subscribe?", "Timestamp": stamp(),
                             "SubscribeURL": subscribe, "SigningCertURL": CERT_URL},
                            identity()[0])
    answer = post(api, confirmation)
    assert answer.status_code == 200 and answer.json() == {"confirmed": TOPIC}
    assert intake.urls == [CERT_URL, subscribe]
    elsewhere = sns.sign({**confirmation, "SubscribeURL": "https://evil.example/confirm"},
                         identity()[0])
    refused = post(api, elsewhere)
    assert refused.status_code == 403 and "SubscribeURL host" in refused.text
    assert intake.urls == [CERT_URL, subscribe] and api.emitter.sent == []


def test_an_authentic_message_that_is_no_ses_event_or_no_tenants_is_answered_and_ignored(
        api: Api, intake):
    note = message(Message=json.dumps({"notificationType": "AmazonSnsSubscriptionSucceeded"}))
    answer = post(api, note)
    assert answer.status_code == 200 and answer.json()["written"] == 0, answer.text
    unknown_tenant = post(api, message(message_id="sns-m-9"))  # no tenant "acme" known
    assert unknown_tenant.status_code == 200 and "no tenant" in unknown_tenant.json()["ignored"]
    assert api.emitter.sent == []


def test_signature_version_1_is_refused_unless_the_operator_allows_it(api: Api, intake):
    api.tenant("acme")
    sha1 = sns.sign(message(), identity()[0], "1")
    refused = post(api, sha1)
    assert refused.status_code == 400 and "SignatureVersion 1" in refused.text
    assert api.emitter.sent == []
    allowing = sns.Policy(topics={TOPIC: None}, allow_signature_v1=True)
    sns.check_version(sha1, allowing)  # the explicit setting lets it through the check


def test_the_replay_memory_is_shared_through_its_file(tmp_path):
    first = sns.SharedSeen(tmp_path / "seen.sqlite3", max_age_s=100)
    second = sns.SharedSeen(tmp_path / "seen.sqlite3", max_age_s=100)  # another API process
    first.add("m-1", timestamp_s=0, now_s=0)
    assert "m-1" in second and "m-2" not in second
    second.add("m-2", timestamp_s=150, now_s=150)  # m-1's window ended at 100: forgotten
    assert "m-1" not in first and "m-2" in first and len(first) == 1
    first.close()
    second.close()


def inbound(body: str, message_id: str, **fields: str) -> dict[str, str]:
    """An inbound text to the tenant's number, as SNS delivers AWS's two-way payload."""
    text = json.loads(sms_inbound.payload("+15551234567", "+18005550100", body, f"in-{message_id}"))
    return message(message_id=message_id, Message=json.dumps({**text, **fields}))


def test_a_stop_texted_to_a_tenants_number_suppresses_the_phone_and_start_lifts_it(api: Api,
                                                                                    intake):
    api.tenant("acme")
    api.tenant("other")
    record = api.state.tenants.get("acme")
    api.state.tenants.put("acme", {**record, "sms_originations": ["+18005550100"]})
    answer = post(api, inbound("Stop please", "sns-s-1"))
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"written": 1, "sms": "opt_out", "tenants": ["acme"]}
    [(topic, key, value)] = api.emitter.sent
    assert (topic, key) == (SUPPRESSIONS.name, "acme:+15551234567"), "not the other tenant's"
    suppression = codec().decode(value)
    assert (suppression["email"], suppression["source"]) == ("+15551234567", "sms_reply")
    assert api.state.suppressions.get("acme:+15551234567") is not None, "read back at once"
    assert post(api, inbound("HELP", "sns-s-2")).json()["written"] == 0
    assert post(api, inbound("start", "sns-s-3")).json()["sms"] == "opt_in"
    assert api.emitter.sent[-1][1:] == ("acme:+15551234567", None), "a tombstone lifts it"
    assert api.state.suppressions.get("acme:+15551234567") is None


def test_an_inbound_text_nobody_owns_or_malformed_is_answered_and_ignored(api: Api, intake):
    api.tenant("acme")  # granted no number
    answer = post(api, inbound("STOP", "sns-s-4"))
    assert answer.status_code == 200 and "no tenant has +18005550100" in answer.json()["ignored"]
    bad = post(api, inbound("STOP", "sns-s-5", destinationNumber="not a number"))
    assert bad.status_code == 200 and "number" in bad.json()["ignored"], bad.text
    assert api.emitter.sent == []


def test_a_forged_or_replayed_stop_suppresses_nothing(api: Api, intake):
    """An inbound STOP is only as good as its SNS signature: forged (another key), from a topic
    nobody configured, or replayed (the same MessageId again), it writes no suppression."""
    api.tenant("acme")
    record = api.state.tenants.get("acme")
    api.state.tenants.put("acme", {**record, "sms_originations": ["+18005550100"]})
    text = json.loads(sms_inbound.payload("+15551234567", "+18005550100", "STOP", "in-x"))
    base = {"Type": "Notification", "MessageId": "sns-f-1", "TopicArn": TOPIC,
            "Message": json.dumps(text), "Timestamp": stamp(), "SigningCertURL": CERT_URL}
    forged = sns.sign(base, other_key())
    assert post(api, forged).status_code in (400, 403), "a forged signature is refused"
    elsewhere = message(message_id="sns-f-2", Message=json.dumps(text),
                        TopicArn="arn:aws:sns:us-east-1:000000000000:not-ours")
    assert post(api, elsewhere).status_code == 403
    assert api.emitter.sent == [] and api.state.suppressions.get("acme:+15551234567") is None
    genuine = message(message_id="sns-f-3", Message=json.dumps(text))
    assert post(api, genuine).json()["written"] == 1
    assert post(api, genuine).json() == {"written": 0, "duplicate": True}, "a replay writes nothing"
    assert len(api.emitter.sent) == 1
