"""The web console under ``/ui``: jobs (why a slot ran or did not), campaigns live, the
operator's view of lag, topology and worker health; served by the API process itself, so there
is no second server to start (issue 31). See docs/console.md."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from api.console import campaigns, jobs, login, operator
from api.console.sessions import LoginThrottle, SessionStore
from api.console.web import PREFIX, ConsoleError, LoginNeeded, render


def install(app: FastAPI) -> None:
    """Mount the console's pages and static files on the API application."""
    app.state.console_sessions = SessionStore()
    app.state.login_throttle = LoginThrottle()
    app.mount(f"{PREFIX}/static", StaticFiles(directory=str(Path(__file__).parent / "static")),
              name="console-static")
    for module in (login, jobs, campaigns, operator):
        app.include_router(module.router, prefix=PREFIX, include_in_schema=False)

    @app.get(PREFIX, include_in_schema=False)
    async def home() -> Response:
        return RedirectResponse(f"{PREFIX}/jobs", status_code=303)

    @app.exception_handler(LoginNeeded)
    async def to_login(request: Request, exc: LoginNeeded) -> Response:
        return RedirectResponse(f"{PREFIX}/login", status_code=303)

    @app.exception_handler(ConsoleError)
    async def refused(request: Request, exc: ConsoleError) -> Response:
        return render(request, "error.html", None, status=exc.status, error=exc.message)
