"""Whether a reminder email's address is suppressed for its tenant (issue 30, item 6).

A campaign's walker reads the ``suppressed`` table of its own recipient partition, co-partitioned
with the addresses it sends to. A reminder email is run by the owner of its *job*'s partition, and
its address may hash to any suppressions partition, so the executor reads a view of the whole
suppressions topic instead (``streams.runtime.topic_view``), kept in a SQLite file (a list with every
bounce of a 50M campaign fits no dict), started on the first reminder email the worker sends.

Linearizable as the walkers' barrier is: before answering, the view is caught up with the
topic's end as of the question, so an opt-out the API (or the SES feedback agent) had
acknowledged before the email's check stops it. A view that cannot catch up answers nothing:
the attempt fails before anything is sent, so retrying it is safe (``ViewBehind``).
"""

from __future__ import annotations

import threading
from email.utils import parseaddr
from pathlib import Path
from typing import Any

from streams.runtime.record_stores import SqliteStore
from streams.runtime.topic_view import TopicView
from streams.topology import SUPPRESSIONS


class ViewBehind(Exception):
    """The suppressions view could not catch up: whether the address is suppressed is unknown."""


def address(raw: str) -> str:
    """A target's ``to`` as the suppressions key it (``Name <a@b>`` or ``a@b``, any case)."""
    return (parseaddr(raw)[1] or raw).strip().lower()


class Suppressions:
    def __init__(self, bootstrap: str, path: Path) -> None:
        self.bootstrap, self.path = bootstrap, path
        self._view: TopicView | None = None
        self._lock = threading.Lock()  # asked from the executor's threads (send_email)

    def _started(self) -> TopicView:
        with self._lock:
            if self._view is None:
                store = SqliteStore(self.path, "Suppression", "tenant")
                self._view = TopicView(self.bootstrap, SUPPRESSIONS, store).start(900)
            return self._view

    def of(self, tenant: str, to: str) -> dict[str, Any] | None:
        """The tenant's suppression of ``to`` (None: not suppressed), as of this call (blocking).
        ViewBehind when the view cannot say."""
        view = self._started()
        if not view.wait_caught_up():
            raise ViewBehind("the suppressions view is behind the topic; not sent, retried")
        return view.get(f"{tenant}:{address(to)}")

    def stop(self) -> None:
        if self._view is not None:
            self._view.stop()
