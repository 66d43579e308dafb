"""SES events into SesFeedback records (``streams.campaigns.ses_events``): one per affected
recipient, on the recipient's partition, in the shapes SES documents ("Examples of event data
that Amazon SES publishes to Amazon SNS")."""

from __future__ import annotations

import json

import pytest

from streams.campaigns import ses_events
from streams.runtime.codec import codec

MAIL = {"timestamp": "2026-01-02T03:04:05.678Z", "source": "news@example.org",
        "sendingAccountId": "123456789012", "messageId": "0100-ses-1",
        "destination": ["A@Example.org", "\"Bee\" <b@example.org>"],
        "tags": {"ses:configuration-set": ["cronstream-acme-shared"],
                 "cronstream-campaign": ["c-1"], "cronstream-chunk": ["u-1:7"]}}
EVENTS = {
    "Bounce": {"eventType": "Bounce", "mail": MAIL, "bounce": {
        "bounceType": "Permanent", "bounceSubType": "General", "feedbackId": "fb-1",
        "timestamp": "2026-01-02T03:04:06.000Z",
        "bouncedRecipients": [{"emailAddress": "a@example.org", "action": "failed",
                               "status": "5.1.1", "diagnosticCode": "smtp; 550 5.1.1 unknown"}]}},
    "Complaint": {"eventType": "Complaint", "mail": MAIL, "complaint": {
        "feedbackId": "fb-2", "complaintFeedbackType": "abuse",
        "timestamp": "2026-01-02T04:00:00.000Z",
        "complainedRecipients": [{"emailAddress": "b@example.org"}]}},
    "Delivery": {"eventType": "Delivery", "mail": MAIL, "delivery": {
        "timestamp": "2026-01-02T03:04:07.000Z", "smtpResponse": "250 2.6.0 ok",
        "recipients": ["a@example.org", "b@example.org"]}},
    "Send": {"eventType": "Send", "mail": MAIL, "send": {}},
    "Reject": {"eventType": "Reject", "mail": MAIL, "reject": {"reason": "Bad content"}},
    "DeliveryDelay": {"eventType": "DeliveryDelay", "mail": MAIL, "deliveryDelay": {
        "delayType": "MailboxFull", "timestamp": "2026-01-02T05:00:00.000Z",
        "delayedRecipients": [{"emailAddress": "b@example.org", "status": "4.2.2",
                               "diagnosticCode": "smtp; 452 4.2.2 full"}]}},
}


def parsed(kind: str, event: dict | None = None) -> list[dict]:
    raw = json.dumps(event or EVENTS[kind])
    return ses_events.records(ses_events.parse_event(raw), raw, tenant="acme", sns_message_id="sns-1",
                            topic_arn="arn:aws:sns:us-east-1:1:t", received_ms=42)


@pytest.mark.parametrize(("kind", "emails"), [
    ("Bounce", ["a@example.org"]), ("Complaint", ["b@example.org"]),
    ("Delivery", ["a@example.org", "b@example.org"]), ("Send", ["a@example.org", "b@example.org"]),
    ("Reject", ["a@example.org", "b@example.org"]), ("DeliveryDelay", ["b@example.org"]),
])
def test_each_event_type_is_one_record_per_affected_recipient(kind, emails):
    records = parsed(kind)
    assert [r["email"] for r in records] == emails
    for record in records:
        assert record["event_type"] == kind and record["ses_message_id"] == "0100-ses-1"
        assert (record["campaign_id"], record["chunk"]) == ("c-1", "u-1:7")
        assert record["configuration_set"] == "cronstream-acme-shared"
        assert json.loads(record["raw"]) == EVENTS[kind], "the raw event is kept for audit"
        assert ses_events.key(record) == f"acme:{record['email']}"
        assert codec().decode(codec().encode("SesFeedback", record)) == record


def test_the_details_of_each_type_are_kept():
    bounce, = parsed("Bounce")
    assert (bounce["bounce_type"], bounce["bounce_subtype"], bounce["feedback_id"]) == (
        "Permanent", "General", "fb-1")
    assert bounce["diagnostic"] == "smtp; 550 5.1.1 unknown"
    assert bounce["event_ms"] == 1767323046000, "the bounce's own time, not the mail's"
    complaint, = parsed("Complaint")
    assert (complaint["complaint_type"], complaint["feedback_id"], complaint["bounce_type"]) == (
        "abuse", "fb-2", None)
    delay, = parsed("DeliveryDelay")
    assert (delay["delay_type"], delay["diagnostic"]) == ("MailboxFull", "smtp; 452 4.2.2 full")
    assert {r["diagnostic"] for r in parsed("Reject")} == {"Bad content"}
    assert parsed("Send")[0]["event_ms"] == 1767323045678, "no time of its own: the mail's"


def test_the_old_notification_format_and_odd_addresses():
    old = {"notificationType": "Bounce", "mail": {**MAIL, "tags": {}},
           "bounce": {**EVENTS["Bounce"]["bounce"], "bouncedRecipients": [
               {"emailAddress": "A@EXAMPLE.org"}, {"emailAddress": "a@example.org"},
               {"emailAddress": "not an address"}, {"emailAddress": 7}]}}
    record, = parsed("Bounce", old)
    assert (record["email"], record["campaign_id"], record["configuration_set"]) == (
        "a@example.org", None, None)


@pytest.mark.parametrize(("message", "says"), [
    ("not json", "not JSON"), ("[1]", "not a JSON object"), ("{}", "no eventType"),
    ('{"notificationType": "AmazonSnsSubscriptionSucceeded", "message": "hi"}', "no mail"),
])
def test_what_is_not_an_ses_event_is_named(message, says):
    with pytest.raises(ses_events.BadEvent, match=says):
        ses_events.parse_event(message)


def test_an_event_without_its_recipients_is_named():
    with pytest.raises(ses_events.BadEvent, match="Bounce without bounce.bouncedRecipients"):
        parsed("Bounce", {"eventType": "Bounce", "mail": MAIL, "bounce": {}})


def test_the_tenant_is_pinned_tagged_or_read_from_a_single_matching_configuration_set():
    event = EVENTS["Delivery"]
    known = {"acme", "a", "a-b"}.__contains__
    assert ses_events.tenant_of(event, "pinned", known) == "pinned"
    assert ses_events.tenant_of(event, None, known) == "acme"
    tagged = {**event, "mail": {**MAIL, "tags": {**MAIL["tags"], "cronstream-tenant": ["t2"]}}}
    assert ses_events.tenant_of(tagged, None, known) == "t2"

    def through(config_set: str) -> str | None:
        mail = {**MAIL, "tags": {"ses:configuration-set": [config_set]}}
        return ses_events.tenant_of({**event, "mail": mail}, None, known)

    # the form since issue 40: the first '_' ends the tenant, whatever '-' the names hold
    assert through("cronstream-a_b-c") == "a" and through("cronstream-a-b_c") == "a-b"
    assert through("cronstream-acme") == "acme", "a tenant's reminders"
    assert through("cronstream-a-b") is None, "a-b's reminders, or a's pool b of the old form"
    assert through("cronstream-nobody_pool") is None
    # the old form, still read for mail sent before the upgrade: only when one tenant matches
    assert through("cronstream-a-b-c") is None, "tenant a pool b-c, or tenant a-b pool c"
    assert through("cronstream-a-pool") == "a"
    assert through("cronstream-nobody-pool") is None
    assert through("someone-elses-set") is None
    assert through("cronstream-acme-") is None


def test_every_send_is_tagged_so_its_events_name_tenant_campaign_chunk_and_fire():
    """SES refuses a tag value outside [A-Za-z0-9_-]{1,256}: a chunk's id and a fire id are
    written so SES takes them, and the chunk comes back as ``upload_id:seq``."""
    from streams.adapters import ses

    tag = ses_events.chunk_tag("0f3a9c2b11de", 42)
    assert ses.tag_value(tag) == tag
    assert ses.tag_value("job-1@2026-11-26T00:00:00+00:00") == "job-1_2026-11-26T00_00_00_00_00"
    assert ses.tag_value("x" * 300) == "x" * 256 and ses.tag_value("") == "_"
    event = {"eventType": "Delivery", "mail": {
        "messageId": "m", "destination": ["a@example.org"],
        "tags": {"cronstream-tenant": ["acme"], "cronstream-campaign": ["c-1"],
                 "cronstream-chunk": [tag]}},
        "delivery": {"recipients": ["a@example.org"]}}
    [record] = ses_events.records(event, "{}", tenant=ses_events.tenant_of(event, None, bool) or "",
                                sns_message_id="s", topic_arn="arn", received_ms=1)
    assert (record["tenant"], record["campaign_id"], record["chunk"]) == (
        "acme", "c-1", "0f3a9c2b11de:42")


GRANTED = {"tenant": "acme", "senders": ["example.org"], "pools": []}


def test_a_reminder_from_a_sender_not_granted_is_refused_before_ses():
    from streams.execution import targets

    class Client:
        def send_email(self, **request):
            raise AssertionError("sent in another's name")

    fired = {"tenant": "acme", "fire_id": "j1@x", "nominal_ms": 0, "job_id": "j1",
             "target": {"email_from": "ceo@other.example", "email_to": "b@example.org",
                        "subject": "s", "text": "t", "html": None}}
    refused = targets.send_email(Client(), fired, GRANTED)
    assert not refused.ok and refused.final and "not one of tenant acme's senders" in refused.error
    unread = targets.send_email(Client(), fired, None)
    assert not unread.ok and not unread.final, "a tenant not read yet is retried, not refused"


def test_the_email_target_and_the_walker_tag_their_sends():
    from streams.execution import targets

    class Client:
        def send_email(self, **request):
            self.request = request
            return {"MessageId": "local-1"}

    client = Client()
    fired = {"tenant": "acme", "fire_id": "j1@2026-11-26T00:00:00Z", "nominal_ms": 0,
             "job_id": "j1", "target": {"email_from": "a@example.org", "email_to": "b@example.org",
                                        "subject": "s", "text": "t", "html": None}}
    assert targets.send_email(client, fired, GRANTED).ok
    assert client.request["ConfigurationSetName"] == "cronstream-acme"
    assert client.request["EmailTags"] == [
        {"Name": "cronstream-tenant", "Value": "acme"},
        {"Name": "cronstream-fire", "Value": "j1_2026-11-26T00_00_00Z"}]


def test_a_reminder_to_a_suppressed_address_is_suppressed_before_ses_with_the_reason():
    from streams.execution import reminder_opt_outs, targets

    class Lookup:
        def __init__(self, answer):
            self.answer, self.asked = answer, []

        def of(self, tenant, to):
            self.asked.append((tenant, reminder_opt_outs.address(to)))
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

    class Client:
        def send_email(self, **request):
            raise AssertionError("sent to a suppressed address")

    fired = {"tenant": "acme", "fire_id": "j1@x", "nominal_ms": 0, "job_id": "j1",
             "target": {"email_from": "a@example.org", "email_to": "Bo <B@Example.org>",
                        "subject": "s", "text": "t", "html": None}}
    lookup = Lookup({"reason": "bounce"})
    result = targets.send_email(Client(), fired, GRANTED, suppressions=lookup)
    assert not result.ok and result.final and "(bounce)" in (result.error or "")
    assert result.suppressed and not result.unknown, "recorded suppressed, not failed"
    assert lookup.asked == [("acme", "b@example.org")]
    result = targets.send_email(Client(), fired, GRANTED,
                                suppressions=Lookup(reminder_opt_outs.ViewBehind("behind")))
    assert not result.ok and not result.final and not result.unknown, "retried: nothing left"
    assert not result.suppressed
