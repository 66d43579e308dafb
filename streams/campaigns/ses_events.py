"""SES events (the JSON an SNS notification carries) into ``SesFeedback`` records: one per
affected recipient, on that recipient's partition (issue 30, event intake).

Pure: the API verifies the SNS envelope (``streams.adapters.sns``) and passes the event here.
Why one record per recipient rather than one per event: a consumer of the feedback topic is the
campaign side's co-partitioned state (suppressions, outcomes), which owns an address only on its
partition (``partition_for(email)``, as recipients and suppressions are placed), and a Delivery
of a call with several To addresses concerns several partitions.

Which recipients an event affects is SES's own answer per type: a Bounce's
``bouncedRecipients``, a Complaint's ``complainedRecipients``, a Delivery's ``recipients``, a
DeliveryDelay's ``delayedRecipients``; Send, Reject and the engagement events concern the mail's
``destination``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from email.utils import parseaddr
from typing import Any

from streams.adapters import ses
from streams.campaigns.recipients import normalise
from streams.records import SesFeedback

CAMPAIGN_TAG, CHUNK_TAG, TENANT_TAG = ses.CAMPAIGN_TAG, ses.CHUNK_TAG, ses.TENANT_TAG
CONFIGURATION_SET_TAG = "ses:configuration-set"
CONFIGURATION_SET_PREFIX = ses.CONFIGURATION_SET_PREFIX  # ses.configuration_set's names


def chunk_tag(upload_id: str, seq: int) -> str:
    """The ``cronstream-chunk`` tag of a campaign chunk's send: ``upload_id-seq`` (a tag value
    may not hold the ':' of the chunk's id; an upload id is hex)."""
    return f"{upload_id}-{seq}"


def _chunk(tag: str | None) -> str | None:
    """A chunk tag as the record keeps it, ``upload_id:seq`` (``chunk_tag`` reversed)."""
    if tag is None or ":" in tag or "-" not in tag:
        return tag
    upload_id, seq = tag.rsplit("-", 1)
    return f"{upload_id}:{seq}"


class BadEvent(ValueError):
    """The Message of an authentic notification is not an SES event this can read."""


def _ms(stamp: Any) -> int | None:
    if not isinstance(stamp, str):
        return None
    try:
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def _first_tag(tags: Mapping[str, Any], name: str) -> str | None:
    values = tags.get(name)
    if isinstance(values, list) and values and isinstance(values[0], str):
        return values[0]
    return None


def _address(raw: Any) -> str | None:
    """The normalised address of ``a@b`` or ``"Name" <a@b>``; None if it is not one."""
    if not isinstance(raw, str):
        return None
    return normalise(parseaddr(raw)[1] or raw)


def event_type(event: Mapping[str, Any]) -> str:
    kind = event.get("eventType") or event.get("notificationType")
    if not isinstance(kind, str) or not kind:
        raise BadEvent("no eventType or notificationType")
    return kind


def _affected(kind: str, event: Mapping[str, Any], mail: Mapping[str, Any]
              ) -> tuple[Mapping[str, Any], list[tuple[Any, Mapping[str, Any]]]]:
    """(the type's own object, [(raw address, that recipient's detail)])."""
    lists = {"Bounce": ("bounce", "bouncedRecipients"),
             "Complaint": ("complaint", "complainedRecipients"),
             "DeliveryDelay": ("deliveryDelay", "delayedRecipients")}
    if kind in lists:
        section, field = lists[kind]
        detail = event.get(section)
        if not isinstance(detail, dict) or not isinstance(detail.get(field), list):
            raise BadEvent(f"{kind} without {section}.{field}")
        return detail, [(r.get("emailAddress"), r) for r in detail[field] if isinstance(r, dict)]
    section = kind[:1].lower() + kind[1:]
    detail = event.get(section) if isinstance(event.get(section), dict) else {}
    if kind == "Delivery":
        if not isinstance(detail.get("recipients"), list):
            raise BadEvent("Delivery without delivery.recipients")
        return detail, [(r, {}) for r in detail["recipients"]]
    destination = mail.get("destination")
    if not isinstance(destination, list):
        raise BadEvent(f"{kind} without mail.destination")
    return detail, [(r, {}) for r in destination]


def tenant_of(event: Mapping[str, Any], pinned: str | None, known: Callable[[str], bool]
              ) -> str | None:
    """The tenant an event belongs to: the topic's own tenant if the operator pinned one, else
    the send's ``cronstream-tenant`` tag, else the known tenant whose configuration set
    (``cronstream-<tenant>_<pool>``, or ``cronstream-<tenant>`` for reminders) the mail went
    through. A set of the old form ``cronstream-<tenant>-<pool>`` (before issue 40) counts only
    when one known tenant matches it: tenant and pool names may both contain '-'. None when
    that names no known tenant, or two.
    """
    if pinned:
        return pinned
    mail = event.get("mail") if isinstance(event.get("mail"), dict) else {}
    tags = mail.get("tags") if isinstance(mail.get("tags"), dict) else {}
    if (tagged := _first_tag(tags, TENANT_TAG)) is not None:
        return tagged
    config_set = _first_tag(tags, CONFIGURATION_SET_TAG)
    owner = ses.configuration_set_owner(config_set or "")
    if owner is None:
        return None
    if owner[1] is not None:  # the unambiguous form
        return owner[0] if known(owner[0]) else None
    rest = owner[0]  # a reminders' set, or the old form: every reading that names a tenant
    matches = [rest[:cut] for cut, char in enumerate(rest)
               if char == "-" and 0 < cut < len(rest) - 1 and known(rest[:cut])]
    matches += [rest] if known(rest) else []
    return matches[0] if len(matches) == 1 else None


def parse_event(raw: str) -> dict[str, Any]:
    """The SES event an SNS notification's Message holds; BadEvent if it is not one (SES's own
    "AmazonSnsSubscriptionSucceeded" note to a new topic is not: it names no mail)."""
    try:
        event = json.loads(raw)
    except ValueError as exc:
        raise BadEvent("Message is not JSON") from exc
    if not isinstance(event, dict):
        raise BadEvent("Message is not a JSON object")
    event_type(event)
    mail = event.get("mail")
    if not isinstance(mail, dict) or not isinstance(mail.get("messageId"), str):
        raise BadEvent("no mail.messageId")
    return event


def records(event: Mapping[str, Any], raw: str, *, tenant: str, sns_message_id: str,
            topic_arn: str, received_ms: int) -> list[SesFeedback]:
    """The SesFeedback records (schemas/ses_feedback.avsc) of one SES event (``parse_event`` of
    ``raw``), one per distinct affected address; an address SES names that is not one is
    skipped. Raises BadEvent when the event lacks what its type must carry."""
    kind = event_type(event)
    mail = event["mail"]
    detail, affected = _affected(kind, event, mail)
    tags = mail.get("tags") if isinstance(mail.get("tags"), dict) else {}
    event_ms = _ms(detail.get("timestamp")) or _ms(mail.get("timestamp")) or received_ms
    common = {
        "tenant": tenant, "event_type": kind,
        "bounce_type": detail.get("bounceType") if kind == "Bounce" else None,
        "bounce_subtype": detail.get("bounceSubType") if kind == "Bounce" else None,
        "complaint_type": detail.get("complaintFeedbackType") if kind == "Complaint" else None,
        "delay_type": detail.get("delayType") if kind == "DeliveryDelay" else None,
        "ses_message_id": mail["messageId"], "feedback_id": detail.get("feedbackId"),
        "event_ms": event_ms, "configuration_set": _first_tag(tags, CONFIGURATION_SET_TAG),
        "campaign_id": _first_tag(tags, CAMPAIGN_TAG), "chunk": _chunk(_first_tag(tags, CHUNK_TAG)),
        "sns_message_id": sns_message_id, "sns_topic_arn": topic_arn,
        "received_ms": received_ms, "raw": raw,
    }
    reason = detail.get("reason") if kind == "Reject" else detail.get("smtpResponse")
    out: dict[str, dict[str, Any]] = {}
    for address, person in affected:
        email = _address(address)
        if email is None or email in out:
            continue
        diagnostic = person.get("diagnosticCode") or person.get("status") or reason
        out[email] = {**common, "email": email,
                      "diagnostic": diagnostic if isinstance(diagnostic, str) else None}
    for record in out.values():  # optional strings: anything else SES sent there is dropped
        for name in ("bounce_type", "bounce_subtype", "complaint_type", "delay_type",
                     "feedback_id"):
            if not isinstance(record[name], str):
                record[name] = None
    return list(out.values())


def key(record: Mapping[str, Any]) -> str:
    """The topic key: the same ``tenant:email`` as the tenant's suppression of that address."""
    return f"{record['tenant']}:{record['email']}"
