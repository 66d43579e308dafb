"""FastAPI application factory for the cronstream API (OpenAPI at ``/docs``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.routes import campaigns, jobs, ops, suppressions
from api.state import ApiState
from streams.runtime import admin, settings

MAX_BODY_BYTES = 512 * 1024  # every body but recipient uploads; documented in the README


class BodyLimit:
    """413 for a body over ``limit`` bytes, whether or not it declares its Content-Length."""

    def __init__(self, app: ASGIApp, limit: int, unlimited_suffix: str) -> None:
        self.app, self.limit, self.unlimited_suffix = app, limit, unlimited_suffix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # recipient uploads stream in bounded memory, whatever their size
        if scope["type"] != "http" or scope["path"].endswith(self.unlimited_suffix):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._reject(send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise _TooLarge
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            await self._reject(send)

    async def _reject(self, send: Send) -> None:
        body = (b'{"detail":[{"loc":["body"],"msg":"request body is larger than '
                + str(self.limit).encode() + b' bytes","type":"body_too_large"}]}')
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


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
        admin.ensure_topics(conf.bootstrap)
        app.state.api = ApiState.connect(conf)
        yield
        app.state.api.close()

    app = FastAPI(
        title="cronstream", version="0.1.0", lifespan=lifespan,
        description="Distributed cron, event-sourced on Kafka. Authenticate with "
                    "`Authorization: Bearer <api key>` (`cronstream tenant create NAME`).",
    )
    app.include_router(jobs.router)
    app.include_router(campaigns.router)
    app.include_router(suppressions.router)
    app.include_router(ops.build_router(conf.bootstrap))
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES, unlimited_suffix="/recipients")

    return app
