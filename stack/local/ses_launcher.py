"""Launches the local AWS messaging server (``stack/messaging_server.py``, run by uvicorn: the
SES-compatible server the workers send mail to, and under ``/sms`` the End User Messaging SMS
one they send texts to) and health-checks it; or, when the settings point the workers at other
endpoints for both, says so and starts nothing.

It exists apart from the servers themselves (ASGI apps) as the part of the stack that starts
them as a process of the home.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx

from stack import processes
from stack.local.home import StackHome
from stack.local.startup import running_or_free, say, wait_healthy
from streams.runtime.settings import REPO_ROOT, Settings


@dataclass
class SesLauncher:
    """The local SES server of the stack whose home is ``home``."""

    home: StackHome

    @property
    def s(self) -> Settings:
        return self.home.s

    def start_ses(self) -> None:
        """The local SES-compatible server (``stack/ses_server.py``) that boto3 talks to."""
        name, pidfile, log = "ses", self.home.pidfile("ses"), self.home.log("ses")
        if running_or_free(name, pidfile, (self.s.ses_port,), "CRONSTREAM_SES_PORT", log,
                            "local SES server", self.s.host):
            return
        say(f"starting the local SES server on {self.s.host}:{self.s.ses_port}, its SMS server "
            f"at {self.s.local_sms_endpoint} (logs of sent mail and texts: {self.ses_log}, "
            f"{self.sms_log})")
        processes.spawn(pidfile, [sys.executable, "-m", "uvicorn",
                                  "stack.messaging_server:create_app",
                                  "--factory", "--host", self.s.host, "--port", str(self.s.ses_port),
                                  # uvicorn closes idle connections after 5 s; boto3 reusing one
                                  # the server is closing gets ConnectionClosedError, which the
                                  # campaign must record unknown (it may have been sent)
                                  "--timeout-keep-alive", "300",
                                  "--log-level", "warning"], log,
                        env={**os.environ, "CRONSTREAM_SES_LOG": str(self.ses_log),
                             "CRONSTREAM_SMS_LOG": str(self.sms_log)}, cwd=REPO_ROOT)
        wait_healthy(name, lambda: httpx.get(f"{self.s.local_ses_endpoint}/_local/stats", timeout=2)
              .status_code == 200, 30, log, pidfile)

    def start_ses_if_local(self) -> None:
        """The local server, when the workers send mail or texts to it; a stack pointed at other
        endpoints for both (a real account, a proxy) neither starts nor health-checks one, and
        says so."""
        sms_is_local = self.s.sms_endpoint.rstrip("/") == self.s.local_sms_endpoint
        if self.s.ses_is_local or sms_is_local:
            self.start_ses()
            for local, name, endpoint in ((self.s.ses_is_local, "SES", self.s.ses_endpoint),
                                          (sms_is_local, "SMS", self.s.sms_endpoint)):
                if not local:
                    say(f"{name}: the workers send to CRONSTREAM_{name}_ENDPOINT={endpoint}, "
                        f"not to the local server")
        else:
            say(f"SES: the workers send to CRONSTREAM_SES_ENDPOINT={self.s.ses_endpoint}, SMS to "
                f"CRONSTREAM_SMS_ENDPOINT={self.s.sms_endpoint}; the local server is not started")

    @property
    def ses_log(self) -> Path:
        return self.s.home / "ses" / "sent.jsonl"

    @property
    def sms_log(self) -> Path:
        """The local SMS server's record of the texts it accepted (its inbound texts'
        deliveries beside it, ``inbound.jsonl``)."""
        return self.s.home / "sms" / "sent.jsonl"
