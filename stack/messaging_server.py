"""The local stack's AWS messaging endpoint: the SES v2 server (``stack/ses_server.py``) at the
root and the End User Messaging SMS server (``stack/sms_server.py``) under ``/sms``, one process
on the stack's SES port (``CRONSTREAM_SES_PORT``).

Why one process and one port: every stack variant (three brokers, TLS, two hosts, the region
pair) already gives its SES server a port of its own and checks it at start; a second port would
have to be threaded through each of them, for a server that only exists on the local stack. An
AWS client tells the two apart by its endpoint, as it would tell two AWS services apart:
``CRONSTREAM_SMS_ENDPOINT`` is this server's address with ``/sms`` (``Settings.local_sms_endpoint``),
and the SMS server's own routes (``/_local/...``) are under it too. Each keeps its own log:
``CRONSTREAM_SES_LOG`` and ``CRONSTREAM_SMS_LOG``, set by ``stack.local.ses_launcher``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.routing import Mount, Route

from stack import ses_server, sms_server

SMS_PREFIX = "/sms"


def create_app() -> Starlette:
    ses, sms = ses_server.create_app(), sms_server.create_app()

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        # a mounted app's lifespan is not run by its parent: both servers' are run here
        async with ses.router.lifespan_context(ses), sms.router.lifespan_context(sms):
            yield

    # boto3 posts to the endpoint's path itself (``/sms``, no slash), which a mount alone
    # would only redirect: the API's one route is served there too
    app = Starlette(routes=[Route(SMS_PREFIX, sms.state.server.api, methods=["POST"]),
                            Mount(SMS_PREFIX, app=sms), Mount("/", app=ses)], lifespan=lifespan)
    app.state.ses, app.state.sms = ses, sms
    return app
