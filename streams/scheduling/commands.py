"""Commands: a user's trigger or backfill of a job (``cronstream.job-commands``), a section of
``ScheduleState`` (``streams.scheduling.deciding``): the slots asked for are fired at once, by
the job's owner, with its epoch."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from streams.records import JobCommand
from streams.runtime.codec import codec
from streams.scheduling import schedule
from streams.scheduling.slots import JobStore

log = logging.getLogger(__name__)


class Commands:
    """The commands section of ``ScheduleState``: the attributes below are the state's."""

    jobs: JobStore
    clock: Callable[[], int]
    emit_fired: Callable[..., Any]

    def command(self, partition: int, cmd: JobCommand) -> None:
        raw = self.jobs.get_in(partition, cmd["job_id"].encode())
        if raw is None:
            log.warning("command %s %s for unknown job %s tenant %s ignored", cmd["command"],
                        cmd["request_id"], cmd["job_id"], cmd["tenant"])
            return
        job = codec().decode(raw)
        now = self.clock()
        if cmd["command"] == "trigger":
            slot = cmd["requested_ms"]
            self.emit_fired(partition, job, schedule.fire_id(job["job_id"], slot), slot,
                            "triggered", now)
        elif cmd["command"] == "backfill":
            until = min(cmd["to_ms"], now)
            for slot in schedule.slots_between(job["schedule"], job["job_id"],
                                               cmd["from_ms"] - 1, until,
                                               schedule.BACKFILL_LIMIT):
                self.emit_fired(partition, job, schedule.fire_id(job["job_id"], slot), slot,
                                "backfilled", now, asked_ms=cmd["requested_ms"])
