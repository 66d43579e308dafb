"""One warning per outage, and one line when it ends, for a question many tasks keep asking.

Why: the send fence and the opt-out barrier are asked by every waiting chunk, each time its
round fails. Warned once per chunk and round, a coordinator's outage wrote hundreds of lines a
second (three nodes, issue 42); warned once per ``warn_every_s`` for all of them, with the
outage's length so far, and a line when the question is answered again, an outage reads as
its start, its progress and its end.
"""

from __future__ import annotations

import logging
import math


class OutageLog:
    def __init__(self, log: logging.Logger, what: str, warn_every_s: float = 30.0) -> None:
        self.log, self.what, self.warn_every_s = log, what, warn_every_s
        self._warned_at = -math.inf  # the last warning, for every asker
        self._since: float | None = None  # the first failure of the current outage

    def failed(self, now: float, detail: str) -> None:
        """A round failed at ``now`` (a loop's clock); warns at most once per ``warn_every_s``."""
        if self._since is None:
            self._since = now
        if now - self._warned_at >= self.warn_every_s:
            self._warned_at = now
            self.log.warning("%s for %.1fs: %s", self.what, now - self._since, detail)

    def answered(self, now: float, by: str = "") -> None:
        """The question was answered at ``now`` (``by`` whom, if that varies): an outage ends."""
        if self._since is not None:
            self.log.info("%s no more, after %.1fs%s", self.what, now - self._since,
                          f" (answered by {by})" if by else "")
            self._since = None
