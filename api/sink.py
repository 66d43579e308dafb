"""Reads of the tables Kafka Connect's sinks write in PostgreSQL (the ledger and its kin).

The API never writes these tables; it reads what the sinks have caught up to. A table the
sink has not created yet (a fresh stack whose Connect worker is still starting) reads as
empty rather than as a 500: "no runs recorded yet" is the truth at that moment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

CONNECT_TIMEOUT_S = 5  # a page waits no longer than this for PostgreSQL to answer the connect


def rows(dsn: str, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """The rows of one query (blocking: run it in the thread pool); none while its table
    does not exist yet."""
    try:
        with psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S) as conn:
            return conn.execute(query, params).fetchall()
    except psycopg.errors.UndefinedTable:
        return []
