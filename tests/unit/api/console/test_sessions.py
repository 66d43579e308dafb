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


def test_one_key_holds_a_bounded_number_of_sessions_the_oldest_going_first():
    from api.console.sessions import MAX_SESSIONS_PER_KEY

    clock = Clock()
    store = SessionStore(b"k" * 32, clock=clock)
    cookies = []
    for _ in range(MAX_SESSIONS_PER_KEY + 1):
        clock.now += 1
        cookies.append(store.create("digest", operator=False)[0])
    other, _ = store.create("another", operator=False)
    assert store.get(cookies[0]) is None, "the key's oldest session went"
    assert all(store.get(c) is not None for c in cookies[1:]) and store.get(other) is not None


def test_login_throttle_counts_failures_per_address_within_the_window():
    from api.console.sessions import LoginThrottle

    clock = Clock()
    throttle = LoginThrottle(failures=3, window_s=60, clients=2, clock=clock)
    for _ in range(3):
        assert throttle.retry_after_s("1.2.3.4") is None
        throttle.failed("1.2.3.4")
    assert throttle.retry_after_s("1.2.3.4") == 60
    assert throttle.retry_after_s("5.6.7.8") is None, "another address is not held"
    clock.now += 60
    assert throttle.retry_after_s("1.2.3.4") is None, "the failures left the window"
    for client in ("a", "b", "c"):
        throttle.failed(client)
    assert len(throttle._seen) == 2, "bounded: the oldest address forgotten"


def test_signed_messages_and_login_tokens():
    store, other = SessionStore(b"k" * 32, clock=Clock()), SessionStore(b"j" * 32, clock=Clock())
    assert store.signed("saved", store.sign("saved"))
    assert not store.signed("anything else", store.sign("saved")) and not store.signed("x", None)
    assert not other.signed("saved", store.sign("saved"))
    nonce, token = store.login_token()
    assert store.login_token_ok(nonce, token) and not store.login_token_ok(nonce, "x")
    assert not store.login_token_ok(None, token) and not other.login_token_ok(nonce, token)
