"""SES events reach cronstream (issue 30, event intake), on the real stack: mail sent through the
local SES server comes back as SNS notifications to ``POST /v1/feedback/sns`` — subscribed and
confirmed, signed, duplicated, delayed and reordered as SNS may — and the feedback topic holds
exactly one record per recipient per event, on the recipient's partition. Forged, unsigned,
wrong-topic and expired (replayed) messages are refused with a 4xx and write nothing; a
redelivery of an accepted message is answered 200 and writes nothing again. The topic is read
to prove both."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from cli.failures import FAILED
from stack.sns_publisher import CERT_PATH, LOCAL_TOPIC_ARN
from streams.adapters import ses, sns
from streams.runtime import settings
from streams.runtime.admin import end_offsets
from streams.runtime.codec import codec
from streams.runtime.kafka_config import client_config
from streams.topology import SES_FEEDBACK, partition_for
from tests.conftest import cluster_partitions
from tests.waiting import wait_for

pytestmark = pytest.mark.integration
SIM = "simulator.amazonses.com"
FEEDBACK_PARTITIONS = [(SES_FEEDBACK.name, p) for p in range(SES_FEEDBACK.count(cluster_partitions()))]


def read_feedback(bootstrap: str, tenant: str) -> list[dict[str, Any]]:
    """Every record of the tenant on the feedback topic, with its partition (run in a child:
    ``stack.isolated``)."""
    consumer = Consumer({**client_config(bootstrap), "group.id": str(uuid.uuid4()),
                         "enable.partition.eof": True, "enable.auto.commit": False})
    consumer.assign([TopicPartition(SES_FEEDBACK.name, p, 0)
                     for p in range(len(FEEDBACK_PARTITIONS))])
    found, at_end, deadline = [], set(), time.monotonic() + 30
    try:
        while len(at_end) < len(FEEDBACK_PARTITIONS) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                    continue
                if msg.key().decode().startswith(f"{tenant}:"):
                    found.append({**codec().decode(msg.value()), "partition": msg.partition(),
                                  "key": msg.key().decode()})
    finally:
        consumer.close()
    return found


def feedback_of(stack, tenant: str) -> list[dict[str, Any]]:
    from stack import isolated

    return isolated.call(f"{__name__}:read_feedback", stack.s.bootstrap, tenant, timeout_s=60)


def ses_client() -> Any:
    """The SES client the workers make, from this process's settings."""
    conf = settings.load()
    return ses.client(conf.ses_endpoint_url, conf.aws_region)


def written(stack) -> int:
    return sum(end_offsets(stack.s.bootstrap, FEEDBACK_PARTITIONS).values())


@pytest.fixture
def subscribed(stack):
    """The local SES server publishing to the API, SNS-like: half the messages twice, each
    delayed up to 1 s in any order, a third of the deliveries delayed first."""
    answer = httpx.post(f"{stack.s.ses_endpoint}/_local/events", timeout=30, json={
        "endpoint": f"{stack.s.api_url}/v1/feedback/sns", "duplicate_ratio": 0.5, "delay_s": 1.0,
        "reorder": True, "delivery_delay_ratio": 0.34, "seed": 30}).json()
    assert answer["confirmed"] and answer["confirmation_answer"] == 200, answer
    yield answer
    httpx.post(f"{stack.s.ses_endpoint}/_local/events", json={"endpoint": None}, timeout=30)


def events_logged(stack, ses_ids: set[str]) -> list[dict[str, Any]]:
    log = stack.ses_log.with_name("events.jsonl")
    lines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [e for e in lines if e["ses_message_id"] in ses_ids]


def test_sent_mail_comes_back_once_per_recipient_per_event(stack, api, subscribed):
    tenant = api.tenant
    label = uuid.uuid4().hex[:8]
    to = [f"{box}+{label}@{SIM}" for box in ("success", "bounce", "complaint", "suppressionlist",
                                              "ooto")] + [f"someone-{label}@example.org"]
    client = ses_client()
    answer = client.send_bulk_email(
        FromEmailAddress="news@example.org", ConfigurationSetName=f"cronstream-{tenant}_shared",
        DefaultContent={"Template": {"TemplateContent": {"Subject": "hi", "Text": "hi"}}},
        DefaultEmailTags=[{"Name": "cronstream-campaign", "Value": "c-feedback"}],
        BulkEmailEntries=[{"Destination": {"ToAddresses": [a]}} for a in to[:4]])
    single = client.send_email(FromEmailAddress="news@example.org",
                               ConfigurationSetName=f"cronstream-{tenant}_shared",
                               Destination={"ToAddresses": to[4:]},
                               Content={"Simple": {"Subject": {"Data": "hi"},
                                                   "Body": {"Text": {"Data": "hi"}}}})
    ses_ids = {r["MessageId"] for r in answer["BulkEmailEntryResults"]} | {single["MessageId"]}
    # the events are queued before the send is answered; pending counts them until delivered
    wait_for(lambda: httpx.get(f"{stack.s.ses_endpoint}/_local/events").json()["pending"] == 0,
             timeout_s=60)
    logged = events_logged(stack, ses_ids)
    assert len(logged) >= 11, logged  # Send of 5 mails, 3 Deliveries, 2 Bounces, 1 Complaint
    assert all(e["answer"] == 200 for e in logged), logged
    expected = Counter((e["ses_message_id"], e["event_type"], r.lower())
                       for e in logged for r in e["recipients"])
    wait_for(lambda: len(feedback_of(stack, tenant)) >= len(expected), timeout_s=60)
    records = feedback_of(stack, tenant)
    got = Counter((r["ses_message_id"], r["event_type"], r["email"]) for r in records)
    assert got == expected and set(got.values()) == {1}, "exactly once per recipient per event"
    kinds = {(r["email"].split("+")[0], r["event_type"], r["bounce_subtype"]) for r in records
             if r["event_type"] in ("Bounce", "Complaint")}
    assert kinds == {("bounce", "Bounce", "General"), ("complaint", "Complaint", None),
                     ("suppressionlist", "Bounce", "Suppressed")}
    for record in records:
        assert record["partition"] == partition_for(record["email"], cluster_partitions())
        assert record["key"] == f"{tenant}:{record['email']}"
        assert json.loads(record["raw"])["mail"]["messageId"] == record["ses_message_id"]
    assert {r["campaign_id"] for r in records if r["ses_message_id"] != single["MessageId"]} == {
        "c-feedback"}


def signed_by_the_local_server(stack, **fields: str) -> dict[str, str]:
    """A Notification about a Delivery to ``to``, authentic as the local SES server signs."""
    to = fields.pop("to", f"x-{uuid.uuid4().hex[:6]}@example.org")
    tenant = fields.pop("tenant")
    event = {"eventType": "Delivery", "mail": {
        "messageId": f"local-test-{uuid.uuid4().hex}", "destination": [to],
        "timestamp": datetime.now(UTC).isoformat(),
        "tags": {"ses:configuration-set": [f"cronstream-{tenant}-shared"]}},
        "delivery": {"recipients": [to], "timestamp": datetime.now(UTC).isoformat()}}
    message = {"Type": "Notification", "MessageId": str(uuid.uuid4()), "TopicArn": LOCAL_TOPIC_ARN,
               "Message": json.dumps(event), "Timestamp": datetime.now(UTC).isoformat(),
               "SigningCertURL": stack.s.ses_endpoint + CERT_PATH, **fields}
    return httpx.post(f"{stack.s.ses_endpoint}/_local/sns/sign", json={"message": message},
                      timeout=10).json()


def test_forged_unsigned_wrong_topic_and_replayed_messages_write_nothing(stack, api):
    url = f"{stack.s.api_url}/v1/feedback/sns"
    tenant = api.tenant

    def post(message: dict[str, str]) -> httpx.Response:
        return httpx.post(url, content=json.dumps(message), timeout=30,
                          headers={"content-type": "text/plain; charset=UTF-8"})

    good = signed_by_the_local_server(stack, tenant=tenant)
    forger_key, _ = sns.new_identity("forger")
    two_hours_ago = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
    refused = {
        "unsigned": ({k: v for k, v in good.items() if k != "Signature"}, 400,
                     "Signature is missing"),
        "forged": (sns.sign({k: v for k, v in good.items() if k != "Signature"}, forger_key), 403,
                   "bad signature"),
        "tampered": ({**good, "Message": good["Message"].replace("Delivery", "Bounce")}, 403,
                     "bad signature"),
        "wrong topic": (signed_by_the_local_server(
            stack, tenant=tenant, TopicArn="arn:aws:sns:us-east-1:000000000000:elsewhere"), 403,
            "not a configured SNS topic"),
        "replayed after its window": (signed_by_the_local_server(
            stack, tenant=tenant, Timestamp=two_hours_ago), 403, "expired"),
        "certificate elsewhere": ({**good, "SigningCertURL": "http://127.0.0.1:9/cert.pem"}, 403,
                                  "not an allowed SNS host"),
    }
    before = written(stack)
    for what, (message, status, says) in refused.items():
        answer = post(message)
        assert answer.status_code == status, (what, answer.text)
        assert says in answer.json()["detail"][0]["msg"], (what, answer.text)
    assert written(stack) == before, "a refused message wrote a record"

    first = post(good)
    assert first.status_code == 200 and first.json()["written"] == 1, first.text
    again = post(good)  # SNS redelivering (or someone replaying) inside the window
    assert again.status_code == 200 and again.json() == {"written": 0, "duplicate": True}
    assert written(stack) == before + 1
    assert len([r for r in feedback_of(stack, tenant)
                if r["sns_message_id"] == good["MessageId"]]) == 1


def test_ses_events_command_sets_up_each_configuration_set_once_and_again(stack):
    """``cronstream ses-events`` through boto3 against the local SES server: the tenant's campaign
    pools and its reminder set publish cronstream's event types to the topic; run again, the
    destinations are updated, not duplicated; an SES error is a clear CLI error."""
    from tests.integration.test_operator import cli

    tenant, topic = f"t{uuid.uuid4().hex[:8]}", "arn:aws:sns:us-east-1:123456789012:cs-events"
    args = ("ses-events", "--tenant", tenant, "--pool", "default", "--pool", "warm",
            "--reminders", "--topic-arn", topic)
    first = cli(*args).stdout
    assert first.count("created event destination cronstream (and the configuration set") == 3
    assert "updated event destination cronstream" in cli(*args[:3], "--topic-arn", topic + "2").stdout
    client = ses_client()
    for name in (f"cronstream-{tenant}_default", f"cronstream-{tenant}_warm", f"cronstream-{tenant}"):
        [dest] = client.get_configuration_set_event_destinations(
            ConfigurationSetName=name)["EventDestinations"]
        assert dest["Name"] == "cronstream" and dest["Enabled"]
        assert set(dest["MatchingEventTypes"]) == set(ses.EVENT_TYPES)
        assert dest["SnsDestination"]["TopicArn"] == (topic + "2" if name.endswith("_default")
                                                      else topic)
    refused = cli("ses-events", "--tenant", "bad name!", "--topic-arn", topic, check=False)
    assert refused.returncode == FAILED and "SES refused the request" in refused.stderr
