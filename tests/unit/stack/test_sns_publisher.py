"""The local SES server's events (``stack.sns_publisher``): the mailbox simulator's answers, the
rate rules, duplicates, and messages the intake's own checks accept. Nothing is delivered here:
the queue is read before its task runs."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from stack.sns_publisher import CERT_PATH, LOCAL_TOPIC_ARN, Publisher
from streams.adapters import sns
from streams.campaigns import ses_events


def queued(config: dict, mails: list[list[str]], tmp_path) -> list[tuple[dict[str, str], bool]]:
    """(message, first delivery?) of every queued delivery, in due order."""

    async def run() -> list[tuple[dict[str, str], bool]]:
        publisher = Publisher("http://127.0.0.1:9", {"endpoint": "http://127.0.0.1:9/x", **config},
                              tmp_path / "events.jsonl")
        publisher.confirmed = True
        for n, to in enumerate(mails):
            publisher.accepted(f"local-{n}", "news@example.org", to, "cronstream-acme-shared",
                               {"cronstream-campaign": "c-1"})
        out = [(message, first) for _, _, message, first in sorted(publisher._due)]
        await publisher.close()
        return out

    return asyncio.run(run())


def events(config: dict, mails: list[list[str]], tmp_path) -> list[dict]:
    return [json.loads(m["Message"]) for m, first in queued(config, mails, tmp_path) if first]


def kinds(found: list[dict]) -> list[str]:
    return [e["eventType"] + (f":{e['bounce']['bounceSubType']}" if "bounce" in e else "")
            for e in found]


@pytest.mark.parametrize(("address", "expected"), [
    ("success@simulator.amazonses.com", ["Send", "Delivery"]),
    ("bounce@simulator.amazonses.com", ["Send", "Bounce:General"]),
    ("complaint@simulator.amazonses.com", ["Send", "Delivery", "Complaint"]),
    ("suppressionlist@simulator.amazonses.com", ["Send", "Bounce:Suppressed"]),
    ("ooto@simulator.amazonses.com", ["Send", "Delivery"]),
    ("bounce+label@simulator.amazonses.com", ["Send", "Bounce:General"]),
    ("someone@example.org", ["Send", "Delivery"]),
])
def test_the_mailbox_simulator_addresses(tmp_path, address, expected):
    assert kinds(events({}, [[address]], tmp_path)) == expected


def test_every_message_is_signed_as_the_intake_checks_it(tmp_path):
    for message, _ in queued({}, [["bounce@simulator.amazonses.com"]], tmp_path):
        parsed = sns.parse(json.dumps(message).encode())
        assert parsed["TopicArn"] == LOCAL_TOPIC_ARN and parsed["SignatureVersion"] == "2"
        assert parsed["SigningCertURL"] == "http://127.0.0.1:9" + CERT_PATH
        sns.verify(parsed, sns.public_key(Publisher.identity()[1], sns.timestamp_s(parsed)))
        event = ses_events.parse_event(parsed["Message"])
        assert ses_events.tenant_of(event, None, {"acme"}.__contains__) == "acme"
        assert event["mail"]["tags"]["cronstream-campaign"] == ["c-1"]


def test_rates_by_pattern_and_delays_duplicates(tmp_path):
    mails = [[f"r{i}@bounce.example"] for i in range(400)] + [["x@example.org"]]
    config = {"rates": [{"pattern": "*@bounce.example", "bounce": 0.5, "complaint": 0.25}],
              "seed": 7, "duplicate_ratio": 0.5, "delay_s": 2, "reorder": True}
    found = queued(config, mails, tmp_path)
    firsts = Counter(json.loads(m["Message"])["eventType"] for m, first in found if first)
    assert firsts["Send"] == 401 and firsts["Bounce"] + firsts["Delivery"] == 401
    assert 150 < firsts["Bounce"] < 250 and 60 < firsts["Complaint"] < 140
    ids = Counter(m["MessageId"] for m, _ in found)
    assert set(ids.values()) == {1, 2} and 0.4 < sum(v == 2 for v in ids.values()) / len(ids) < 0.6
    again = [m for m, first in found if not first]
    assert all(m == next(o for o, f in found if f and o["MessageId"] == m["MessageId"])
               for m in again), "a duplicate is the same message, signature and all"
