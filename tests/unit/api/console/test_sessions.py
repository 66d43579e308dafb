"""Console sessions: signed, unforgeable, expiring, revoked by logout; the CSRF check."""

from api.console.sessions import SessionStore, csrf_ok


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_cookie_names_its_session():
    store = SessionStore(b"k" * 32, ttl_s=60, clock=Clock())
    cookie, session = store.create("digest", operator=False)
    assert store.get(cookie) == session
    assert not session.operator and session.key_sha256 == "digest"


def test_a_tampered_or_foreign_cookie_is_refused():
    store = SessionStore(b"k" * 32, clock=Clock())
    cookie, _ = store.create("digest", operator=False)
    sid, _, signature = cookie.rpartition(".")
    assert store.get(f"{sid}.{'0' * len(signature)}") is None
    assert store.get(f"{sid}x.{signature}") is None
    assert store.get(sid) is None and store.get("") is None and store.get(None) is None
    # signed with another secret (another process): refused
    other = SessionStore(b"j" * 32, clock=Clock())
    assert other.get(cookie) is None


def test_a_session_expires():
    clock = Clock()
    store = SessionStore(b"k" * 32, ttl_s=60, clock=clock)
    cookie, _ = store.create("digest", operator=True)
    clock.now += 59
    assert store.get(cookie) is not None
    clock.now += 1
    assert store.get(cookie) is None


def test_logout_invalidates_the_cookie():
    store = SessionStore(b"k" * 32, clock=Clock())
    cookie, _ = store.create("digest", operator=False)
    other, _ = store.create("digest", operator=False)
    store.drop(cookie)
    assert store.get(cookie) is None
    assert store.get(other) is not None  # only that session


def test_each_session_has_its_own_csrf_token():
    store = SessionStore(b"k" * 32, clock=Clock())
    _, a = store.create("digest", operator=False)
    _, b = store.create("digest", operator=False)
    assert a.csrf != b.csrf
    assert csrf_ok(a, a.csrf)
    assert not csrf_ok(a, b.csrf)
    assert not csrf_ok(a, "") and not csrf_ok(a, None)
