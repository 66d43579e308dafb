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
# one key's live sessions: a leaked or scripted key could otherwise fill the table and push
# every other tenant's sessions out (issue 40); the key's oldest goes first
MAX_SESSIONS_PER_KEY = 20
LOGIN_FAILURES = 10  # failed logins from one client address within the window, then 429s
LOGIN_WINDOW_S = 60.0
LOGIN_CLIENTS = 10_000  # client addresses remembered (the oldest forgotten first)


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
            own = [s for s in self._live.values() if s.key_sha256 == key_sha256]
            if len(own) >= MAX_SESSIONS_PER_KEY:
                del self._live[min(own, key=lambda s: s.expires_s).sid]
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

    def sign(self, text: str) -> str:
        """A signature of ``text`` by this process: a message put in a redirect's query by the
        console itself (``web.back``) carries one, so a link cannot make a page say anything
        else (``?msg=`` showed any text on a page: issue 40)."""
        return hmac.new(self._secret, b"msg:" + text.encode(), hashlib.sha256).hexdigest()

    def signed(self, text: str | None, signature: str | None) -> bool:
        return bool(text) and hmac.compare_digest(self.sign(text or ""), signature or "")

    def login_token(self) -> tuple[str, str]:
        """A login form's CSRF pair: a random value for a cookie, and the value the form must
        post back (its signature): another site's page can make a browser post the login
        form, but can read neither."""
        nonce = secrets.token_urlsafe(24)
        return nonce, self._sign(f"login:{nonce}")

    def login_token_ok(self, cookie: str | None, submitted: str | None) -> bool:
        return bool(cookie) and bool(submitted) and hmac.compare_digest(
            self._sign(f"login:{cookie}"), submitted or "")

    def _purge_locked(self) -> None:
        now = self._clock()
        for sid in [sid for sid, s in self._live.items() if s.expires_s <= now]:
            del self._live[sid]


def csrf_ok(session: Session, submitted: str | None) -> bool:
    """A form's CSRF token is the session's own (synchronizer token): a page of another site
    can make the browser post with the cookie, but cannot read the token to put in the form."""
    return bool(submitted) and hmac.compare_digest(session.csrf, submitted or "")


class LoginThrottle:
    """Failed logins per client address: past ``failures`` within ``window_s`` the address is
    refused (429) until the oldest of them leaves the window. Why: a key is 256 bits, but an
    unthrottled login form is still a free oracle and a cheap way to make the API hash all day.
    Pure, clock injected; bounded to ``clients`` addresses."""

    def __init__(self, failures: int = LOGIN_FAILURES, window_s: float = LOGIN_WINDOW_S,
                 clients: int = LOGIN_CLIENTS, clock: Callable[[], float] = time.monotonic) -> None:
        self.failures, self.window_s, self.clients, self._clock = failures, window_s, clients, clock
        self._lock = threading.Lock()
        self._seen: dict[str, list[float]] = {}

    def _recent_locked(self, client: str, now: float) -> list[float]:
        recent = [t for t in self._seen.get(client, []) if now - t < self.window_s]
        if recent:
            self._seen[client] = recent
        else:
            self._seen.pop(client, None)
        return recent

    def retry_after_s(self, client: str) -> float | None:
        """None when ``client`` may try a login now, else the seconds until it may."""
        with self._lock:
            now = self._clock()
            recent = self._recent_locked(client, now)
            if len(recent) < self.failures:
                return None
            return max(0.0, recent[-self.failures] + self.window_s - now)

    def failed(self, client: str) -> None:
        with self._lock:
            now = self._clock()
            recent = self._recent_locked(client, now)
            self._seen.pop(client, None)  # re-inserted last: the dict's order is by last failure
            self._seen[client] = [*recent, now][-self.failures:]
            while len(self._seen) > self.clients:
                del self._seen[next(iter(self._seen))]
