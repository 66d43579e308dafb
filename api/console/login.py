"""Sign in with an API key (a tenant's, or the operator's), sign out.

The key is posted once and exchanged for a session cookie: HttpOnly (no script reads it),
SameSite=Strict (no other site's page sends it), Secure when the console is served over TLS.
The login form has no session yet, so its CSRF protection is SameSite plus the check that a
posted key is valid: a forged login could only sign the victim into the forger's own tenant,
which the Strict cookie of a cross-site post does not even carry back.
"""

from __future__ import annotations

import hmac
from typing import Annotated
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response

from api.console.sessions import SESSION_TTL_S
from api.console.web import COOKIE, PREFIX, SignedIn, operator_digest, posted, render, sessions, signed_in
from api.state import api_state
from streams.adapters.tenants import key_hash

router = APIRouter()
Who = Annotated[SignedIn, Depends(signed_in)]


@router.get("/login")
async def login_page(request: Request) -> Response:
    return render(request, "login.html", None)


@router.post("/login")
async def login(request: Request) -> Response:
    body = (await request.body()).decode("utf-8", errors="replace")
    key = (parse_qs(body).get("key") or [""])[0].strip()
    digest = key_hash(key) if key else ""
    operator = operator_digest()
    is_operator = bool(key) and operator is not None and hmac.compare_digest(digest, operator)
    if not is_operator and (not key or api_state(request).tenant_for_key(digest) is None):
        return render(request, "login.html", None, status=401, error="unknown API key")
    cookie, _ = sessions(request).create(digest, is_operator)
    response = RedirectResponse(f"{PREFIX}/ops" if is_operator else f"{PREFIX}/jobs",
                                status_code=303)
    response.set_cookie(COOKIE, cookie, max_age=SESSION_TTL_S, path=PREFIX, httponly=True,
                        samesite="strict", secure=request.url.scheme == "https")
    return response


@router.post("/logout")
async def logout(request: Request, who: Who) -> Response:
    await posted(request, who)
    sessions(request).drop(request.cookies.get(COOKIE))
    response = RedirectResponse(f"{PREFIX}/login", status_code=303)
    response.delete_cookie(COOKIE, path=PREFIX)
    return response
