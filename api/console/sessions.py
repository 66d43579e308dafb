"""Console sessions: an API key exchanged once for a signed, expiring, revocable cookie.

Why a server-side table and a signature both: the table is what makes logout (and expiry) real,
since a cookie the server has forgotten opens nothing even if a copy survives in some browser;
the HMAC over the session id means a guessed or tampered cookie is refused before the table is
consulted, and the table never holds a value an attacker chose. The key itself is never kept:
a tenant session holds the key's SHA-256, so every request resolves the tenant afresh through
the API's own lookup (``ApiState.tenant_for_key``) and a deleted tenant or rotated key ends
its sessions at once.

Pure: no FastAPI, no clock of its own (injected), so the unit tests step time instead of
sleeping. The table lives in the API process: a restart logs everyone out, which is the safe
direction.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

SESSION_TTL_S = 8 * 3600  # a working day; then the key is asked for again
MAX_SESSIONS = 10_000  # bounded memory: the oldest session goes first when full


@dataclass(frozen=True)
class Session:
    """Who is signed in: a tenant (by its key's digest) or the operator."""

    sid: str
    key_sha256: str  # the tenant's key digest, or the operator key's
    operator: bool
    csrf: str  # the token every state-changing form of this session must carry
    expires_s: float


class SessionStore:
    """Signed session cookies, checked against a table of live sessions."""

    def __init__(self, secret: bytes | None = None, ttl_s: float = SESSION_TTL_S,
                 clock: Callable[[], float] = time.time) -> None:
        """``secret``: the HMAC key (a fresh random one by default: sessions do not outlive the
        process anyway); ``clock``: wall seconds, stepped by tests."""
        self._secret = secret or secrets.token_bytes(32)
        self._ttl_s, self._clock = ttl_s, clock
        self._lock = threading.Lock()
        self._live: dict[str, Session] = {}

    def _sign(self, sid: str) -> str:
        return hmac.new(self._secret, sid.encode(), hashlib.sha256).hexdigest()

    def create(self, key_sha256: str, operator: bool) -> tuple[str, Session]:
        """A new session and the cookie value that names it (``sid.signature``)."""
        sid = secrets.token_urlsafe(24)
        session = Session(sid, key_sha256, operator, secrets.token_urlsafe(24),
                          self._clock() + self._ttl_s)
        with self._lock:
            if len(self._live) >= MAX_SESSIONS:
                self._purge_locked()
                if len(self._live) >= MAX_SESSIONS:
                    oldest = min(self._live.values(), key=lambda s: s.expires_s)
                    del self._live[oldest.sid]
            self._live[sid] = session
        return f"{sid}.{self._sign(sid)}", session

    def get(self, cookie: str | None) -> Session | None:
        """The live session a cookie names, or None: missing, forged, expired or logged out."""
        if not cookie or "." not in cookie:
            return None
        sid, _, signature = cookie.rpartition(".")
        if not hmac.compare_digest(signature, self._sign(sid)):
            return None
        with self._lock:
            session = self._live.get(sid)
            if session is not None and session.expires_s <= self._clock():
                del self._live[sid]
                return None
        return session

    def drop(self, cookie: str | None) -> None:
        """Log out: the session is forgotten, so its cookie opens nothing from now on."""
        session = self.get(cookie)
        if session is not None:
            with self._lock:
                self._live.pop(session.sid, None)

    def _purge_locked(self) -> None:
        now = self._clock()
        for sid in [sid for sid, s in self._live.items() if s.expires_s <= now]:
            del self._live[sid]


def csrf_ok(session: Session, submitted: str | None) -> bool:
    """A form's CSRF token is the session's own (synchronizer token): a page of another site
    can make the browser post with the cookie, but cannot read the token to put in the form."""
    return bool(submitted) and hmac.compare_digest(session.csrf, submitted or "")
