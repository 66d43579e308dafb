"""Tasks that keep the faust event they work for.

faust takes a table write's partition from the *current event*, a weak reference held in a
context variable that a task copies when it is created. A task created while another event is
current (the executor starts a buffered slot when the previous run of its job ends) sees that
other event, and once it has been collected, none at all: its done-table write raised "Cannot
modify table key from outside of stream iteration", the slot was left unacknowledged, and the
partition's committed offset stayed there until the next rebalance (seen on `cronstream.fired`
in the failover benchmark).
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

from faust.streams import _current_event

T = TypeVar("T")


def event_task(event: Any, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """Run ``work`` as a task whose current event is ``event`` (the caller keeps ``event``
    referenced for as long as the work runs, as faust's own stream iteration does)."""
    context = contextvars.copy_context()
    context.run(_current_event.set, weakref.ref(event))
    return asyncio.get_running_loop().create_task(work, context=context)
