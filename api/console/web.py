"""What every console page shares: the templates, the signed-in check, form posts with their
CSRF check, and the API's errors turned into a message on the page.

Why pages call the API's own route functions (``api.routes.jobs.list_jobs`` and the like) with
the tenant the session resolves to: the console then reads and writes exactly what the API
would for that tenant's key, its ownership checks (``find_job``, the campaigns' ``_own``), its
validation and its rate limit included, so there is no second place where tenant isolation
could go wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates

from api.console.sessions import Session, SessionStore, csrf_ok
from api.state import api_state
from streams.adapters.tenants import key_hash
from streams.runtime.settings import is_loopback

PREFIX = "/ui"
COOKIE = "cronstream_console"
TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))


class ConsoleError(Exception):
    """A page-level refusal (forged form, wrong kind of session), rendered as an HTML page
    with its status; the API's own JSON errors are untouched (the handler is for this type)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class LoginNeeded(Exception):
    """No live session: the browser is sent to the login page."""


@dataclass(frozen=True)
class SignedIn:
    """A request's session and, for a tenant's session, the tenant record the API's key lookup
    gives now (so a deleted tenant or a rotated key ends the session at its next request)."""

    session: Session
    tenant: dict[str, Any] | None

    @property
    def name(self) -> str:
        return "operator" if self.tenant is None else str(self.tenant["tenant"])


def sessions(request: Request) -> SessionStore:
    store: SessionStore = request.app.state.console_sessions
    return store


def operator_digest(request: Request) -> str | None:
    """The operator key's digest, as the API's settings say now (``CRONSTREAM_OPERATOR_KEY``,
    ``Settings.operator_key``: read at each check, so a rotated key signs everyone out)."""
    key = api_state(request).conf.operator_key
    return key_hash(key) if key else None


def signed_in(request: Request) -> SignedIn:
    """The dependency of every page: the live session, its tenant resolved through the API."""
    session = sessions(request).get(request.cookies.get(COOKIE))
    if session is None:
        raise LoginNeeded
    if session.operator:
        if session.key_sha256 != operator_digest(request):  # the operator key changed: sign in again
            raise LoginNeeded
        return SignedIn(session, None)
    tenant = api_state(request).tenant_for_key(session.key_sha256)
    if tenant is None:
        raise LoginNeeded
    if not api_state(request).allow_request(tenant):
        raise ConsoleError(429, f"tenant {tenant['tenant']} is over its "
                                f"{tenant['requests_per_s']} requests/s; try again in a second")
    return SignedIn(session, tenant)


def tenant_of(who: SignedIn) -> dict[str, Any]:
    """The tenant, for pages that show a tenant's data (the operator has none of its own)."""
    if who.tenant is None:
        raise ConsoleError(403, "this page shows a tenant's data: sign in with the tenant's API key")
    return who.tenant


def operator_only(who: SignedIn) -> None:
    if who.tenant is not None:
        raise ConsoleError(403, "the operator pages need the operator key")


async def posted(request: Request, who: SignedIn) -> dict[str, str]:
    """A state-changing form's fields, once its CSRF token is checked (else a 403 page).
    Parsed here (urlencoded, first value of each field) rather than with FastAPI's ``Form``,
    which would add python-multipart to the API's dependencies for two-field forms."""
    body = (await request.body()).decode("utf-8", errors="replace")
    fields = {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}
    if not csrf_ok(who.session, fields.get("csrf")):
        raise ConsoleError(403, "the form's CSRF token is missing or wrong: reload the page and "
                                "submit it again")
    return fields


def problem_text(exc: HTTPException) -> str:
    """The message of an API error (``api.errors.problem``'s list shape, or a plain detail)."""
    detail = exc.detail
    if not (isinstance(detail, list) and detail and isinstance(detail[0], dict)):
        return str(detail)
    said = []
    for item in detail:
        field = ".".join(str(part) for part in item.get("loc", [])[1:])  # without "body"/"query"
        said.append(f"{field}: {item.get('msg', '')}" if field else str(item.get("msg", "")))
    return "; ".join(said)


def render(request: Request, template: str, who: SignedIn | None, status: int = 200,
           **context: Any) -> HTMLResponse:
    said = request.query_params.get("msg")
    message = said if sessions(request).signed(said, request.query_params.get("sig")) else None
    context.update(who=who, csrf=who.session.csrf if who else "", prefix=PREFIX, message=message)
    return TEMPLATES.TemplateResponse(request, template, context, status_code=status)


def back(request: Request, path: str, message: str) -> RedirectResponse:
    """After a form post, see the page again (post/redirect/get) with what happened: the
    message signed (``SessionStore.sign``), so only the console's own are shown."""
    sep = "&" if "?" in path else "?"
    signature = sessions(request).sign(message)
    return RedirectResponse(f"{PREFIX}{path}{sep}msg={quote(message)}&sig={signature}",
                            status_code=303)


def loopback_host(request: Request) -> bool:
    """Whether the browser asked for the console at a loopback name (``localhost``,
    127.0.0.0/8, ``::1``): the only place a cookie without ``Secure`` is acceptable."""
    return is_loopback((request.url.hostname or "").strip("[]").lower())


def cookie_secure(request: Request) -> bool:
    """``Secure`` on every console cookie unless the console is reached at a loopback host:
    behind a TLS proxy the API sees plain http, so the request's own scheme (what decided it
    before) left the session cookie sendable over http (issue 40)."""
    return request.url.scheme == "https" or not loopback_host(request)
