"""In-process stand-ins for the scheduler's collaborators, for unit tests of its pure logic:
the producer (``Recorder``), the jobs table (``Jobs``) and the executor's side (``Runs``)."""

from __future__ import annotations

from typing import Any

from streams.scheduling import deciding


class Recorder:
    """Stands in for the librdkafka producer: keeps what would have been produced."""

    def __init__(self) -> None:
        self.values: list[bytes] = []
        self.topics: list[str] = []
        self.keys: list[str] = []
        self.unacked = 0  # what ``flush`` reports still in flight (a partition without a leader)
        self.flushes: list[float] = []  # the timeout of each flush

    def flush(self, timeout_s: float = 30.0) -> int:
        self.flushes.append(timeout_s)
        return self.unacked

    def produce(self, topic, key, value, partition=None, **_) -> None:
        self.produce_all(topic, [(key, value)], partition)

    def produce_all(self, topic, records, partition=None, **_) -> None:
        for key, value in records:
            self.values.append(value)
            self.topics.append(topic.name)
            self.keys.append(key)


class Jobs:
    """The jobs table as ``ScheduleState`` reads it (``get_in``), by job id."""

    def __init__(self, jobs: dict[str, bytes] | None = None) -> None:
        self.jobs = jobs if jobs is not None else {}

    def get_in(self, partition: int, key: bytes) -> bytes | None:
        return self.jobs.get(key.decode())

    def items_in(self, partition: int, from_key: bytes | None = None
                 ) -> list[tuple[bytes, bytes]]:
        rows = sorted((k.encode(), v) for k, v in self.jobs.items())
        return [(k, v) for k, v in rows if from_key is None or k >= from_key]


class Runs:
    """The executor's side as the scheduler reads it (``streams.handoff.Runs``): done marks by fire
    id, nothing in flight, no queue positions."""

    def __init__(self, marks: dict[str, bytes] | None = None) -> None:
        self.marks = marks if marks is not None else {}

    def done_mark(self, partition: int, fid: str) -> bytes | None:
        return self.marks.get(fid)

    def in_flight_ids(self) -> set[str]:
        return set()

    def queues(self, ends: dict[int, int]) -> dict[int, Any]:
        return {}


def schedule_state(jobs: Any = None, runs: Runs | None = None, **options: Any
                   ) -> deciding.ScheduleState:
    """A ``ScheduleState`` on fakes, its records kept by a ``Recorder`` (``state._emitter``)."""
    state = deciding.ScheduleState(jobs if jobs is not None else Jobs(), runs or Runs(), **options)
    state._emitter = Recorder()
    return state


class Lease:
    """A region's lease as the send paths ask it (``streams.runtime.authority.Lease``), held or
    not as the test says; ``checks_left`` ends it after that many ``check`` calls (a lease that
    runs out between two of a send's checks)."""

    def __init__(self, epoch: int | None = None, horizon_ms: int = 0,
                 checks_left: int | None = None) -> None:
        import asyncio

        self.name: str | None = "a"
        self.epoch, self._horizon, self.checks_left = epoch, horizon_ms, checks_left
        self.changed = asyncio.Event()

    def grant(self, epoch: int) -> None:
        self.epoch = epoch
        self.changed.set()

    def holds(self) -> int | None:
        return self.epoch

    async def held(self) -> int:
        while self.epoch is None:
            self.changed.clear()
            await self.changed.wait()
        return self.epoch

    def check(self) -> int:
        from streams.runtime.authority import LeaseLost

        if self.checks_left is not None:
            if self.checks_left == 0:
                self.epoch = None
            self.checks_left -= 1
        if self.epoch is None:
            raise LeaseLost("region a: no current lease; not sent")
        return self.epoch

    def horizon_ms(self) -> int:
        return self._horizon
