"""A task started for an event sees that event as faust's current event, whatever was current
where it was started (the executor's buffered slots: a "Cannot modify table key from outside of
stream iteration" left slots unacknowledged and a partition's commits stuck)."""

from __future__ import annotations

import asyncio
import gc
import weakref

from faust.streams import _current_event, current_event

from streams.runtime.event_context import event_task


class Event:
    """Stands in for a faust event: weak-referenceable, nothing else is used."""


def test_the_task_sees_its_own_event_not_the_one_current_where_it_started() -> None:
    async def scenario() -> tuple[object, object]:
        mine = Event()
        other = Event()
        _current_event.set(weakref.ref(other))  # the previous run's event
        del other
        gc.collect()  # ... already collected, as it was when the bug hit

        async def seen() -> object:
            return current_event()

        plain = await asyncio.ensure_future(seen())
        kept = await event_task(mine, seen())
        return plain, (kept is mine)

    plain, kept = asyncio.run(scenario())
    assert plain is None  # what a plain task saw: no event, so no partition for a table write
    assert kept is True
