"""FastAPI application factory for the cronstream API (OpenAPI at ``/docs``)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import fastapi_offline
from fastapi import FastAPI, HTTPException
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api import console
from api.routes import campaigns, feedback, job_imports, jobs, ops, suppressions
from api.state import ApiState
from streams.campaigns import retention
from streams.runtime import admin, settings

MAX_BODY_BYTES = 512 * 1024  # every body but the streamed ones; documented in docs/api.md
# the routes whose body may be larger: a recipient upload and a streamed job import, read in
# bounded memory (``api.streamed.body_lines``) by ``api.routes.campaigns.upload_recipients`` and
# ``api.routes.job_imports.stream_import`` after the tenant is authenticated (a dependency,
# resolved before the route reads the stream)
UNLIMITED_ROUTES = (("PUT", re.compile(r"/v1/campaigns/[^/]+/recipients")),
                    ("POST", re.compile(r"/v1/job-imports/stream")))


def body_unlimited(method: str, path: str) -> bool:
    """Whether a request may send a body over ``MAX_BODY_BYTES``: only the exact streamed routes.

    Why not every path ending in ``/recipients`` (as it was): ``PUT /v1/jobs/recipients`` is
    ``PUT /v1/jobs/{job_id}``, whose JSON body FastAPI reads whole before any dependency, the
    authentication included: an anonymous 1.5 GB chunked body took the API from 0.89 to 3.35 GB
    (issue 40)."""
    return any(method == m and pattern.fullmatch(path) for m, pattern in UNLIMITED_ROUTES)


class BodyLimit:
    """413 for a body over ``limit`` bytes, whether or not it declares its Content-Length,
    on every route but the upload (``body_unlimited``)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit
        self.detail = [{"loc": ["body"], "msg": f"request body is larger than {limit} bytes",
                        "type": "body_too_large"}]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or body_unlimited(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await JSONResponse({"detail": self.detail}, status_code=413)(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                # an HTTPException, because it is raised inside FastAPI's reading of the body,
                # which passes those on to the exception handler and makes anything else a 400
                raise HTTPException(413, detail=self.detail)
            return message

        await self.app(scope, counted, send)


DOCS_ASSETS = "/docs/assets"
# Swagger UI 5 (its bundle and CSS) as the ``fastapi-offline`` package ships them; only its
# files are used. Why not ``swagger-ui-bundle``: its Swagger UI 3 refuses an OpenAPI 3.1
# document ("does not specify a valid version field"), which is what FastAPI writes, so the
# page rendered that error instead of the API (found by the browser test)
SWAGGER_UI_DIR = Path(fastapi_offline.__file__).parent / "static"


def serve_docs(app: FastAPI) -> None:
    """The OpenAPI page at ``/docs``, its Swagger UI served from a package
    (``SWAGGER_UI_DIR``): FastAPI's own page loads it from a public CDN, so on a machine
    without internet (ours, many production networks) it was blank."""
    app.mount(DOCS_ASSETS, StaticFiles(directory=str(SWAGGER_UI_DIR)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json", title="cronstream API",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png")


def create_app(state: ApiState | None = None) -> FastAPI:
    """The application (``uvicorn --factory api.app:create_app``, ``cronstream api``).

    Without ``state`` it makes its own when it starts: the topics ensured, the views caught up,
    closed when it stops. With one, it serves that state as it is, and whoever built it closes
    it: the seam through which tests run the app in-process on stores they fill themselves.
    """
    conf = state.conf if state is not None else settings.load()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if state is not None:
            app.state.api = state
            yield
            return
        admin.check_reachable(conf.bootstrap)  # a wrong password or CA: one clear line, no hang
        admin.ensure_topics(conf.bootstrap, partitions=conf.partitions)
        app.state.api = ApiState.connect(conf)
        # what no campaign can read any more leaves cronstream.recipients (kept until then)
        pruner = retention.Pruner(conf.bootstrap, conf.partitions,
                                  conf.recipients_prune_interval_s).start()
        yield
        pruner.stop()
        app.state.api.close()

    app = FastAPI(
        title="cronstream", version="0.1.0", lifespan=lifespan,
        description="Distributed cron, event-sourced on Kafka. Authenticate with "
                    "`Authorization: Bearer <api key>` (`cronstream tenant create NAME`).",
        docs_url=None, redoc_url=None,  # FastAPI's pages load their scripts from a public CDN
    )
    serve_docs(app)
    app.include_router(jobs.router)
    app.include_router(job_imports.router)
    app.include_router(campaigns.router)
    app.include_router(suppressions.router)
    app.include_router(feedback.router)
    app.include_router(ops.build_router(conf.bootstrap, conf.standby_bootstrap, conf.region))
    console.install(app)
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES)

    return app
