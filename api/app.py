"""FastAPI application factory for the cronstream API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api.routes import jobs
from streams import admin, settings
from streams.emit import Emitter


def create_app() -> FastAPI:
    conf = settings.load()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        admin.ensure_topics(conf.bootstrap)
        app.state.emitter = Emitter(conf.bootstrap, "cronstream-api")
        yield
        app.state.emitter.close()

    app = FastAPI(title="cronstream", version="0.1.0", lifespan=lifespan)
    app.include_router(jobs.router)

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app
