"""Amazon SNS HTTP(S) messages: AWS's signature check, the envelope rules, a replay memory, and
the signing half for the local SES server and the tests (issue 30, event intake).

Why verify ourselves rather than trust the network: the feedback endpoint is public (SNS cannot
send a bearer key) and what it accepts becomes suppressions, so the signature is the credential.
The algorithm is AWS's documented one ("Verifying the signatures of Amazon SNS messages"):

- the *canonical string* is ``Name\\nValue\\n`` for each field in a fixed order — Notification:
  Message, MessageId, Subject (only if present), Timestamp, TopicArn, Type; SubscriptionConfirmation
  and UnsubscribeConfirmation: Message, MessageId, SubscribeURL, Timestamp, Token, TopicArn, Type;
- ``Signature`` is base64 of an RSA PKCS#1 v1.5 signature of it, SHA1 for ``SignatureVersion`` 1
  and SHA256 for 2, by the key of the X.509 certificate at ``SigningCertURL``;
- that URL is trusted only if it is https on an SNS host (``sns.<region>.amazonaws.com``): a
  message naming any other certificate could be signed by anyone.

Everything here is pure (no network, no clock of its own): the API route fetches and caches the
certificate and passes the time in, so the unit tests run on a key and certificate they make.
"""

from __future__ import annotations

import base64
import binascii
import heapq
import json
import re
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

NOTIFICATION = "Notification"
SUBSCRIBE = "SubscriptionConfirmation"
UNSUBSCRIBE = "UnsubscribeConfirmation"
NOTIFICATION_FIELDS = ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type")
CONFIRMATION_FIELDS = ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn",
                       "Type")
SIGNED_FIELDS = {NOTIFICATION: NOTIFICATION_FIELDS, SUBSCRIBE: CONFIRMATION_FIELDS,
                 UNSUBSCRIBE: CONFIRMATION_FIELDS}
HASHES: dict[str, Callable[[], hashes.HashAlgorithm]] = {"1": hashes.SHA1, "2": hashes.SHA256}
# sns.<region>.amazonaws.com[.cn], the region spelled as one (us-east-1, us-gov-west-1,
# cn-north-1): a looser "sns.<anything>" also matches S3 virtual hosts such as
# sns.s3-external-1.amazonaws.com, a bucket anyone could have named "sns"
DEFAULT_CERT_HOSTS = (r"sns\.[a-z]{2}(?:-[a-z]+)+-\d+\.amazonaws\.com(?:\.cn)?",)
CLOCK_SKEW_S = 300.0  # a Timestamp this far in the future is still believed (clocks differ)


class Rejected(ValueError):
    """A message refused with ``status`` (4xx), naming the problem: nothing is written."""

    def __init__(self, status: int, problem: str) -> None:
        super().__init__(problem)
        self.status, self.problem = status, problem


@dataclass(frozen=True)
class Policy:
    """What the operator allows (``Settings.sns_policy``): topics (ARN -> tenant, or None when the
    tenant is read from each event's configuration set), hosts a certificate or a SubscribeURL
    may be fetched from (regexes matched against the URL's ``host[:port]``), whether plain http
    is allowed (the local stack only), and how old a message may be."""

    topics: Mapping[str, str | None]
    cert_hosts: Sequence[str] = DEFAULT_CERT_HOSTS
    allow_http: bool = False
    max_age_s: float = 3900.0  # SNS retries an HTTP(S) delivery for at most 3,600 s; + skew
    # SignatureVersion 1 signs with SHA1, whose collisions are practical; SNS signs with 2 when
    # the topic asks (SignatureVersion attribute), so 1 is refused unless the operator says
    allow_signature_v1: bool = False

    def host_allowed(self, netloc: str) -> bool:
        return any(re.fullmatch(pattern, netloc) for pattern in self.cert_hosts)


def parse(body: bytes) -> dict[str, str]:
    """The envelope of an SNS message: a JSON object whose signed fields are strings. Raises
    Rejected(400) for anything else (a raw-message-delivery body has no envelope, and is
    refused as unsigned)."""
    try:
        message = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Rejected(400, "body is not a JSON SNS message") from exc
    if not isinstance(message, dict):
        raise Rejected(400, "body is not a JSON SNS message")
    kind = message.get("Type")
    if not isinstance(kind, str) or kind not in SIGNED_FIELDS:  # {} is unhashable: not a 500
        raise Rejected(400, f"unknown SNS message Type {str(kind)[:50]!r}")
    for name in ("Signature", "SignatureVersion", "SigningCertURL"):
        if not isinstance(message.get(name), str) or not message[name]:
            raise Rejected(400, f"unsigned message: {name} is missing")
    for name in SIGNED_FIELDS[kind]:
        if name == "Subject" and message.get(name) is None:
            continue  # the one optional signed field
        if not isinstance(message.get(name), str):
            raise Rejected(400, f"{kind} without {name}")
    if message["SignatureVersion"] not in HASHES:
        raise Rejected(400, f"unknown SignatureVersion {message['SignatureVersion'][:10]!r}")
    return message


def check_version(message: Mapping[str, str], policy: Policy) -> None:
    """Rejected(400) for SignatureVersion 1 (SHA1) unless the policy allows it (issue 40)."""
    if message["SignatureVersion"] == "1" and not policy.allow_signature_v1:
        raise Rejected(400, "SignatureVersion 1 (SHA1) is refused: set the topic's "
                            "SignatureVersion attribute to 2, or CRONSTREAM_SNS_ALLOW_SIGNATURE_V1=1")


def canonical(message: Mapping[str, str]) -> bytes:
    """The string AWS signs: ``Name\\nValue\\n`` for each signed field of the type, in order."""
    parts = []
    for name in SIGNED_FIELDS[message["Type"]]:
        if name == "Subject" and message.get(name) is None:
            continue
        parts.append(f"{name}\n{message[name]}\n")
    return "".join(parts).encode()


def check_url(url: str, policy: Policy, what: str) -> str:
    """``url`` if it may be fetched: https (http only where the policy allows), no credentials
    in it, on an allowed host. Raises Rejected(403) naming ``what`` otherwise."""
    parts = urlsplit(url)
    schemes = ("https", "http") if policy.allow_http else ("https",)
    if parts.scheme not in schemes:
        raise Rejected(403, f"{what} {url[:200]!r} is not https")
    if parts.username is not None or parts.password is not None or not parts.hostname:
        raise Rejected(403, f"{what} {url[:200]!r} is not a plain host URL")
    if not policy.host_allowed(parts.netloc.lower()):
        raise Rejected(403, f"{what} host {parts.netloc[:100]!r} is not an allowed SNS host")
    return url


def check_topic(message: Mapping[str, str], policy: Policy) -> str | None:
    """The tenant the topic is pinned to (None: read from the events). Raises Rejected(403) for
    a topic the operator did not configure."""
    topic = message["TopicArn"]
    if topic not in policy.topics:
        raise Rejected(403, f"topic {topic[:200]!r} is not a configured SNS topic")
    return policy.topics[topic]


def timestamp_s(message: Mapping[str, str]) -> float:
    try:
        stamp = datetime.fromisoformat(message["Timestamp"].replace("Z", "+00:00"))
    except ValueError as exc:
        raise Rejected(400, f"Timestamp {message['Timestamp'][:40]!r} is not ISO 8601") from exc
    if stamp.tzinfo is None:
        raise Rejected(400, "Timestamp has no time zone")
    return stamp.timestamp()


def check_age(message: Mapping[str, str], now_s: float, policy: Policy) -> float:
    """The message's Timestamp (epoch s) if it is inside the window. Older is a replay: SNS never
    retries past an hour, so no genuine delivery is refused by it."""
    at = timestamp_s(message)
    if now_s - at > policy.max_age_s:
        raise Rejected(403, f"expired: Timestamp {message['Timestamp']} is more than "
                            f"{policy.max_age_s:.0f} s old")
    if at - now_s > CLOCK_SKEW_S:
        raise Rejected(403, f"Timestamp {message['Timestamp']} is in the future")
    return at


def public_key(cert_pem: bytes, now_s: float) -> rsa.RSAPublicKey:
    """The RSA key of a PEM certificate valid at ``now_s``; Rejected(403) otherwise."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        raise Rejected(403, "SigningCertURL is not a PEM certificate") from exc
    now = datetime.fromtimestamp(now_s, UTC)
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        raise Rejected(403, "the signing certificate is not valid now")
    key = cert.public_key()
    if not isinstance(key, rsa.RSAPublicKey):
        raise Rejected(403, "the signing certificate's key is not RSA")
    return key


def verify(message: Mapping[str, str], key: rsa.RSAPublicKey) -> None:
    """Raises Rejected(403) unless ``Signature`` is the key's signature of the canonical string."""
    try:
        signature = base64.b64decode(message["Signature"], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise Rejected(403, "bad signature: not base64") from exc
    try:
        key.verify(signature, canonical(message), padding.PKCS1v15(),
                   HASHES[message["SignatureVersion"]]())
    except InvalidSignature as exc:
        raise Rejected(403, "bad signature: it does not match the message") from exc


# -- the signing side: the local SES server, the tests -------------------------------------------

def new_identity(common_name: str, valid_days: int = 365) -> tuple[rsa.RSAPrivateKey, bytes]:
    """A fresh RSA key and a self-signed certificate of it (PEM), as SNS's signing identity."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=valid_days))
            .sign(key, hashes.SHA256()))
    return key, cert.public_bytes(serialization.Encoding.PEM)


def sign(message: dict[str, str], key: rsa.RSAPrivateKey, version: str = "2") -> dict[str, str]:
    """``message`` with SignatureVersion and Signature set as SNS sets them."""
    signed = {**message, "SignatureVersion": version}
    signature = key.sign(canonical(signed), padding.PKCS1v15(), HASHES[version]())
    signed["Signature"] = base64.b64encode(signature).decode()
    return signed


# -- replays ---------------------------------------------------------------------------------------

class SeenMessages:
    """MessageIds accepted within the age window, so a second delivery writes nothing again.

    Bounded two ways: an id is forgotten once its message's Timestamp is older than the window
    (a delivery of it after that is refused as expired anyway), and at ``capacity`` ids the
    oldest are forgotten early. It is per API process and lost on restart: a duplicate that
    reaches another process (or this one after a restart, or after an early forget) is written
    again, which is why whoever consumes the topic is idempotent on the SES event's message id,
    event type and recipient (docs/operations.md).
    """

    def __init__(self, max_age_s: float, capacity: int = 1_000_000) -> None:
        self.max_age_s, self.capacity = max_age_s, capacity
        self._expiry: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def __contains__(self, message_id: str) -> bool:
        return message_id in self._expiry

    def __len__(self) -> int:
        return len(self._expiry)

    def add(self, message_id: str, timestamp_s: float, now_s: float) -> None:
        self._forget(now_s)
        expiry = timestamp_s + self.max_age_s
        self._expiry[message_id] = expiry
        heapq.heappush(self._heap, (expiry, message_id))
        while len(self._expiry) > self.capacity:
            self._pop()

    def _forget(self, now_s: float) -> None:
        while self._heap and self._heap[0][0] < now_s:
            self._pop()

    def _pop(self) -> None:
        expiry, message_id = heapq.heappop(self._heap)
        if self._expiry.get(message_id) == expiry:
            del self._expiry[message_id]


class SharedSeen:
    """``SeenMessages`` kept in a SQLite file, so every API process of a home, and each after a
    restart, knows what the others accepted: a MessageId is claimed once however many processes
    it is delivered to (the memory was per process: issue 40). Forgotten once its message is
    older than the window (a delivery after that is refused as expired anyway). Processes on
    other hosts keep their own file; the topic's consumer stays idempotent for them
    (docs/security.md)."""

    def __init__(self, path: Path, max_age_s: float) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, timeout=10,
                                   isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS seen (message_id TEXT PRIMARY KEY, "
                         "expiry REAL NOT NULL)")
        self._db.execute("CREATE INDEX IF NOT EXISTS seen_expiry ON seen (expiry)")

    def __contains__(self, message_id: str) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1 FROM seen WHERE message_id = ?",
                                    (message_id,)).fetchone() is not None

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM seen").fetchone()[0])

    def add(self, message_id: str, timestamp_s: float, now_s: float) -> None:
        with self._lock:
            self._db.execute("DELETE FROM seen WHERE expiry < ?", (now_s,))
            self._db.execute("INSERT OR REPLACE INTO seen VALUES (?, ?)",
                             (message_id, timestamp_s + self.max_age_s))

    def close(self) -> None:
        with self._lock:
            self._db.close()
