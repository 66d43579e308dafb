"""Wrapping a library's method once per process, its original kept on the wrapper.

Why one helper: the worker wraps methods of aiokafka and faust (the coordinator lookup, the
metadata refresh, the group's heartbeats, the worker consumer's fetch wait), each a workaround
that cites its upstream issue. Each wrapper must call the library's own method, never an earlier
wrapper of it (installing twice would stack them), and tests compare against that original: it
is kept on the wrapper as ``unwrapped``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def original(owner: type, name: str) -> Any:
    """``owner.name`` as the library defines it, whether or not it is wrapped now."""
    current = getattr(owner, name)
    return getattr(current, "unwrapped", current)


def replace(owner: type, name: str, wrapper: Callable[..., Any]) -> None:
    """Make ``wrapper`` ``owner.name``, in place of any earlier wrapper (idempotent)."""
    wrapper.unwrapped = original(owner, name)  # type: ignore[attr-defined]
    setattr(owner, name, wrapper)
