"""Sign in with an API key (a tenant's, or the operator's), sign out.

The key is posted once and exchanged for a session cookie: HttpOnly (no script reads it),
SameSite=Strict (no other site's page sends it), Secure unless the console is reached at a
loopback host (``web.cookie_secure``). The login form carries its own CSRF token, paired with a
cookie set when the form is served (``SessionStore.login_token``): a forged login would sign
the victim into the forger's tenant, where what the victim then enters is the forger's to read.
Failed logins are throttled per client address (``sessions.LoginThrottle``), and one key
holds at most ``MAX_SESSIONS_PER_KEY`` sessions (issue 40).
"""

from __future__ import annotations

import hmac
from typing import Annotated
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response

from api.console.sessions import SESSION_TTL_S, LoginThrottle
from api.console.web import (
    COOKIE,
    PREFIX,
    SignedIn,
    cookie_secure,
    operator_digest,
    posted,
    render,
    sessions,
    signed_in,
)
from api.state import api_state
from streams.adapters.tenants import key_hash

router = APIRouter()
Who = Annotated[SignedIn, Depends(signed_in)]


LOGIN_COOKIE = "cronstream_login"
LOGIN_TOKEN_TTL_S = 3600


def _login_form(request: Request, status: int = 200, error: str | None = None) -> Response:
    """The login page with a fresh CSRF pair: the cookie, and the form's hidden field."""
    nonce, token = sessions(request).login_token()
    response = render(request, "login.html", None, status=status, error=error, login_token=token)
    response.set_cookie(LOGIN_COOKIE, nonce, max_age=LOGIN_TOKEN_TTL_S, path=f"{PREFIX}/login",
                        httponly=True, samesite="strict", secure=cookie_secure(request))
    return response


def client_of(request: Request) -> str:
    """Who a login attempt is throttled as: the connecting address (behind a proxy, the
    proxy's: docs/security.md)."""
    return request.client.host if request.client else "?"


@router.get("/login")
async def login_page(request: Request) -> Response:
    return _login_form(request)


@router.post("/login")
async def login(request: Request) -> Response:
    throttle: LoginThrottle = request.app.state.login_throttle
    client = client_of(request)
    wait_s = throttle.retry_after_s(client)
    if wait_s is not None:
        response = render(request, "login.html", None, status=429,
                          error="too many failed sign-ins from this address; try again later")
        response.headers["Retry-After"] = str(max(1, round(wait_s)))
        return response
    body = (await request.body()).decode("utf-8", errors="replace")
    fields = parse_qs(body)
    if not sessions(request).login_token_ok(request.cookies.get(LOGIN_COOKIE),
                                            (fields.get("login_token") or [""])[0]):
        return _login_form(request, status=403, error="the sign-in form expired or did not come "
                           "from this console: sign in again")
    key = (fields.get("key") or [""])[0].strip()
    digest = key_hash(key) if key else ""
    operator = operator_digest(request)
    is_operator = bool(key) and operator is not None and hmac.compare_digest(digest, operator)
    if not is_operator and (not key or api_state(request).tenant_for_key(digest) is None):
        throttle.failed(client)
        return _login_form(request, status=401, error="unknown API key")
    cookie, _ = sessions(request).create(digest, is_operator)
    response = RedirectResponse(f"{PREFIX}/ops" if is_operator else f"{PREFIX}/jobs",
                                status_code=303)
    response.set_cookie(COOKIE, cookie, max_age=SESSION_TTL_S, path=PREFIX, httponly=True,
                        samesite="strict", secure=cookie_secure(request))
    response.delete_cookie(LOGIN_COOKIE, path=f"{PREFIX}/login")
    return response


@router.post("/logout")
async def logout(request: Request, who: Who) -> Response:
    await posted(request, who)
    sessions(request).drop(request.cookies.get(COOKIE))
    response = RedirectResponse(f"{PREFIX}/login", status_code=303)
    response.delete_cookie(COOKIE, path=PREFIX)
    return response
