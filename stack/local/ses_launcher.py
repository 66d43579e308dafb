"""Launches the local SES-compatible server (``stack/ses_server.py``, run by uvicorn) that the
workers send mail to, and health-checks it; or, when the settings point the workers at another
SES endpoint, says so and starts nothing.

It exists apart from ``stack/ses_server.py`` (the server itself, an ASGI app) as the part of
the stack that starts that server as a process of the home.
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
        say(f"starting the local SES server on {self.s.host}:{self.s.ses_port} "
            f"(log of sent mail: {self.ses_log})")
        processes.spawn(pidfile, [sys.executable, "-m", "uvicorn", "stack.ses_server:create_app",
                                  "--factory", "--host", self.s.host, "--port", str(self.s.ses_port),
                                  # uvicorn closes idle connections after 5 s; boto3 reusing one
                                  # the server is closing gets ConnectionClosedError, which the
                                  # campaign must record unknown (it may have been sent)
                                  "--timeout-keep-alive", "300",
                                  "--log-level", "warning"], log,
                        env={**os.environ, "CRONSTREAM_SES_LOG": str(self.ses_log)}, cwd=REPO_ROOT)
        wait_healthy(name, lambda: httpx.get(f"{self.s.local_ses_endpoint}/_local/stats", timeout=2)
              .status_code == 200, 30, log, pidfile)

    def start_ses_if_local(self) -> None:
        """The local SES server, when it is where the workers send; a stack pointed at another
        endpoint (a real account, a proxy) neither starts nor health-checks one, and says so."""
        if self.s.ses_is_local:
            self.start_ses()
        else:
            say(f"SES: the workers send to CRONSTREAM_SES_ENDPOINT={self.s.ses_endpoint}; the "
                "local SES server is not started")

    @property
    def ses_log(self) -> Path:
        return self.s.home / "ses" / "sent.jsonl"
