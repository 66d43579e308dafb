"""RFC 8058 one-click unsubscribe: signed, unguessable tokens and the headers that carry them.

A token names (tenant, address, campaign) and carries an HMAC-SHA256 over them with the secret
from ``CRONSTREAM_UNSUBSCRIBE_SECRET`` (``Settings.unsubscribe_secret``, passed in by the walker
and the API); without the secret nobody can mint one for another
address. Every campaign email carries ``List-Unsubscribe: <https://…/v1/unsubscribe/TOKEN>`` and
``List-Unsubscribe-Post: List-Unsubscribe=One-Click``; a POST to that URL suppresses at once.
"""

from __future__ import annotations

import base64
import hmac


class BadToken(ValueError):
    pass


def _secret(secret: str) -> bytes:
    if not secret or len(secret) < 16:
        raise RuntimeError("CRONSTREAM_UNSUBSCRIBE_SECRET (>= 16 characters) is not set")
    return secret.encode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def token(secret: str, tenant: str, email: str, campaign_id: str) -> str:
    payload = f"{tenant}\n{email}\n{campaign_id}".encode()
    mac = hmac.digest(_secret(secret), payload, "sha256")  # one-shot, in C: one per recipient sent
    return f"{_b64(payload)}.{_b64(mac)}"


def verify(secret: str, value: str) -> tuple[str, str, str]:
    """(tenant, email, campaign id) of a valid token; BadToken otherwise."""
    try:
        payload_text, mac_text = value.split(".", 1)
        payload, mac = _unb64(payload_text), _unb64(mac_text)
    except (ValueError, TypeError) as exc:
        raise BadToken("malformed token") from exc
    if not hmac.compare_digest(hmac.digest(_secret(secret), payload, "sha256"), mac):
        raise BadToken("token signature does not match")
    parts = payload.decode(errors="replace").split("\n")
    if len(parts) != 3:
        raise BadToken("malformed token")
    return parts[0], parts[1], parts[2]


ONE_CLICK = {"List-Unsubscribe-Post": "List-Unsubscribe=One-Click"}  # the same on every email


def headers(secret: str, base_url: str, tenant: str, email: str,
            campaign_id: str) -> dict[str, str]:
    """The recipient's own header; ``ONE_CLICK`` goes with it on every email (a bulk call sends
    it once, in the template: botocore serialises each entry's headers one structure at a time)."""
    url = f"{base_url.rstrip('/')}/v1/unsubscribe/{token(secret, tenant, email, campaign_id)}"
    return {"List-Unsubscribe": f"<{url}>"}
