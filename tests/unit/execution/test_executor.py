"""The executor's commit protocol, on fakes (no broker): a fired record is run, its outcome
acknowledged on the ledger, the scheduler told, its done mark made visible and then acknowledged,
and only then does the partition's commit pass it (``streams.execution.executor``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from bench.spike import job, webhook_target
from streams.execution.done_marks import DoneMarks
from streams.execution.executor import BACKLOG_EVERY_S, TURN, Executor
from streams.execution.targets import CallResult
from streams.handoff import Gate
from streams.runtime.codec import codec
from streams.runtime.partition_reader import Assigned
from streams.scheduling.schedule import fire_id
from streams.topology import DLQ, INTENT, LEDGER, REFUSED, TopicSpec
from tests.unit.fakes import schedule_state

SLOT = 1_800_000_000_000
EMAIL = {"type": "email", "email_from": "a@example.com", "email_to": "b@example.com",
         "subject": "hi", "text": "hello"}
CHANGELOG = TopicSpec(name="done-changelog", key="fire_id", schema="", compacted=True, doc="")
PARTITIONS = 8  # the cluster's partition count these tests run with (Settings.partitions)


def fired_record(job_id: str, target: dict[str, Any] | None = None, tenant: str = "bench",
                 epoch: int = 0) -> bytes:
    """A fired record as the scheduler writes it (``ScheduleState.emit_fired``)."""
    state = schedule_state()
    state.epoch = epoch
    j = codec().decode(job(job_id, "0 * * * * *", SLOT - 60_000, tenant=tenant,
                           target=target or webhook_target("http://127.0.0.1:9/hook")))
    state.emit_fired(0, j, fire_id(job_id, SLOT), SLOT, "fired", SLOT + 5)
    return state._emitter.values[0]


class Msg:
    def __init__(self, partition: int, offset: int, value: bytes) -> None:
        self._at, self._value = (partition, offset), value

    def partition(self) -> int:
        return self._at[0]

    def offset(self) -> int:
        return self._at[1]

    def value(self) -> bytes:
        return self._value


class World:
    """Every fake the executor talks to, writing one log of what happened in order; the test
    answers the broker's acknowledgements itself (``ack_ledger``, ``ack_marks``)."""

    def __init__(self, result: CallResult | None = None) -> None:
        self.log: list[tuple[str, Any]] = []
        self.sent: list[tuple[str, bytes | None]] = []  # what the outbox produced, in order
        self.result = result or CallResult(True, 200, None)
        self.ledger: list[asyncio.Future[None]] = []
        self.marks: list[tuple[asyncio.Future[Any], dict[int, list[tuple[str, bytes | None]]]]] = []
        self.rows: dict[bytes, bytes] = {}
        self.room = threading.Event()
        self.room.set()
        self.deliver: Callable[[Any], None] | None = None
        self.next_offset = 500

    # the reader
    def start(self, loop: Any, deliver: Callable[[Any], None]) -> None:
        self.deliver = deliver

    def assign(self, partitions: set[int]) -> None:
        self.log.append(("assign", sorted(partitions)))

    def revoke(self, partitions: set[int]) -> None:
        self.log.append(("revoke", sorted(partitions)))

    def commit(self, offsets: dict[int, int], on_failed: Any) -> None:
        if offsets:
            self.log.append(("commit", dict(offsets)))

    # the ledger's outbox
    def send(self, topic: TopicSpec, key: str, value: bytes | None,
             partition: int | None = None) -> asyncio.Future[None]:
        self.log.append((f"{topic.name} sent", key))
        self.sent.append((topic.name, value))
        future = asyncio.get_running_loop().create_future()
        self.ledger.append(future)
        return future

    # the done table's changelog producer and its RocksDB
    def acked_offsets(self, topic: TopicSpec, by_partition: dict[int, list[tuple[str, bytes | None]]]
                      ) -> asyncio.Future[Any]:
        self.log.append(("marks sent", [(k, v) for r in by_partition.values() for k, v in r]))
        future = asyncio.get_running_loop().create_future()
        self.marks.append((future, by_partition))
        return future

    def get_in(self, partition: int, key: bytes) -> bytes | None:
        return self.rows.get(key)

    def write_acked(self, partition: int, rows: list[tuple[bytes, bytes]],
                    offsets: range | None) -> None:
        self.log.append(("marks written", [(k.decode(), v) for k, v in rows], offsets))
        self.rows.update(rows)

    # the targets
    async def attempt(self, fired: dict[str, Any]) -> CallResult:
        self.log.append(("attempt", fired["fire_id"]))
        return self.result

    def ack_ledger(self) -> None:
        for future in self.ledger:
            if not future.done():
                future.set_result(None)

    def ack_marks(self) -> None:
        for future, by_partition in self.marks:
            if not future.done():
                landed = []
                for partition, records in by_partition.items():
                    first = self.next_offset
                    self.next_offset += len(records)
                    landed.append((partition, first, self.next_offset - 1, len(records)))
                future.set_result(landed)


class Decided:
    """The scheduler's side (``streams.handoff.Decisions``): each slot decided, in the log."""

    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def slot_decided(self, fid: str) -> None:
        self.log.append(("decided", fid))


def executor_in(world: World, lease: Any = None, clock: Callable[[], int] = lambda: SLOT + 10,
                **options: Any) -> Executor:
    """An executor on ``world``'s fakes, its runs under a region's ``lease`` if given
    (``tests.unit.fakes.Lease``; none: one region)."""
    options.setdefault("partitions", PARTITIONS)
    executor = Executor(DoneMarks(world, world, CHANGELOG), world, world, world, Gate(),
                        clock=clock, region=lease, **options)
    executor.decisions = Decided(world.log)
    executor.start()
    executor.assign({0})
    assert world.deliver is not None
    world.deliver(Assigned({0: 10}))
    return executor


async def until(condition: Callable[[], bool], turns: int = 1_000, timeout_s: float = 5.0
                ) -> None:
    """Let the loop run until ``condition`` holds: at least ``turns`` turns of the loop and, as
    long as a timer may still be pending (a retry's backoff of a few milliseconds), up to
    ``timeout_s``. Turns alone raced a 10 ms backoff on a fast machine: 1,000 empty turns took
    less than 10 ms."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    turn = 0
    while turn < turns or loop.time() < deadline:
        if condition():
            return
        await asyncio.sleep(0 if turn < turns else 0.001)
        turn += 1
    raise AssertionError("the executor never got there")


def test_run_then_ledger_acknowledged_then_done_then_commit():
    world = World()
    fid = fire_id("job-a", SLOT)

    async def main() -> None:
        executor = executor_in(world)
        world.deliver([Msg(0, 10, fired_record("job-a"))])
        await until(lambda: world.ledger)
        assert world.log[1:] == [("attempt", fid), (f"{LEDGER.name} sent", fid)]
        assert executor.taken.committable() == {}, "nothing is resolved before the ledger is acked"
        world.ack_ledger()
        await until(lambda: world.marks)
        assert world.log[3:] == [("decided", fid), ("marks sent", [(fid, b"succeeded")])]
        assert executor.done_mark(0, fid) == b"succeeded", "visible before it is durable"
        assert executor.taken.committable() == {}, "the mark is not acknowledged yet"
        world.ack_marks()
        await until(lambda: executor.taken.commit_point(0) == 11)
        assert world.log[5:] == [("marks written", [(fid, b"succeeded")], range(500, 501))]
        executor.reader.commit(executor.taken.committable(), executor.taken.uncommitted)
        assert world.log[-1] == ("commit", {0: 11})

    asyncio.run(main())


def test_a_failed_run_writes_its_dead_letter_before_the_mark():
    world = World(CallResult(False, 500, "HTTP 500"))
    fid = fire_id("job-f", SLOT)

    async def main() -> None:
        executor_in(world)
        world.deliver([Msg(0, 10, fired_record("job-f"))])
        await until(lambda: world.ledger)
        assert (f"{DLQ.name} sent", fid) in world.log and not world.marks
        world.ack_ledger()
        await until(lambda: world.marks)
        assert world.log[-1] == ("marks sent", [(fid, b"failed")])

    asyncio.run(main())


def test_a_reminder_not_sent_to_a_suppressed_recipient_is_recorded_suppressed_not_dead_lettered():
    world = World(CallResult(False, None, "suppressed: b@example.com is suppressed for the tenant "
                             "(bounce); not sent", final=True, note="not sent: address suppressed",
                             suppressed=True))
    fid = fire_id("job-s", SLOT)

    async def main() -> None:
        executor_in(world)
        world.deliver([Msg(0, 10, fired_record("job-s", EMAIL))])
        await until(lambda: world.marks)
        world.ack_marks()  # the intent
        await until(lambda: world.ledger)
        assert not any(topic == DLQ.name for topic, _ in world.sent), "nothing to fix"
        [entry] = [codec().decode(v) for topic, v in world.sent if topic == LEDGER.name]
        assert (entry["outcome"], entry["reason"], entry["attempts"]) == (
            "suppressed", "not sent: address suppressed", 1)
        world.ack_ledger()
        await until(lambda: len(world.marks) == 2)
        assert world.log[-1] == ("marks sent", [(fid, b"suppressed")])

    asyncio.run(main())


def test_the_outcome_of_a_run():
    from streams.execution.executor import outcome_of

    assert outcome_of(CallResult(True, 200, None)) == "succeeded"
    assert outcome_of(CallResult(False, 500, "HTTP 500")) == "failed"
    assert outcome_of(CallResult(False, None, "timeout", final=True, unknown=True)) == "unknown"
    assert outcome_of(CallResult(False, None, "opted out", final=True, suppressed=True)) == \
        "suppressed"


SMS = {"type": "sms", "sms_to": "+15551234567", "sms_body": "Dentist at 9",
       "sms_origination": "+18005550100"}


@pytest.mark.parametrize("target", [EMAIL, SMS], ids=["email", "sms"])
def test_an_email_or_text_intent_is_acknowledged_before_its_only_attempt(target):
    world = World()
    fid = fire_id("job-e", SLOT)

    async def main() -> None:
        executor_in(world)
        world.deliver([Msg(0, 10, fired_record("job-e", target))])
        await until(lambda: world.marks)
        assert world.log[-1] == ("marks sent", [(fid, INTENT)])
        assert ("attempt", fid) not in world.log, "attempted before the intent was durable"
        world.ack_marks()
        await until(lambda: world.ledger)
        written = world.log.index(("marks written", [(fid, INTENT)], range(500, 501)))
        assert written < world.log.index(("attempt", fid))

    asyncio.run(main())


def throttled_once(world: World) -> tuple[str, bytes]:
    """An email job's fired record whose first attempt ``world`` answers throttled and whose
    second it sends, retried after 10 ms: its fire id and the record."""
    answers = [CallResult(False, None, "throttled: slow down"), CallResult(True, None, None)]

    async def attempt(fired: dict[str, Any]) -> CallResult:
        world.log.append(("attempt", fired["fire_id"]))
        return answers.pop(0)

    world.attempt = attempt  # type: ignore[method-assign]
    state = schedule_state()
    retried = {**codec().decode(job("job-t", "0 * * * * *", SLOT - 60_000, target=EMAIL)),
               "retry_max_attempts": 3, "retry_initial_backoff_s": 0.01,
               "retry_max_backoff_s": 0.01}
    fid = fire_id("job-t", SLOT)
    state.emit_fired(0, retried, fid, SLOT, "fired", SLOT + 5)
    return fid, state._emitter.values[0]


def test_a_refused_attempt_says_so_while_it_waits_and_intends_again_before_the_next():
    """At most once, and ``unknown`` only for what was on the wire: an email throttled (nothing
    left) has its mark say ``REFUSED`` while the executor backs off, so a crash then leaves a
    run to make again; ``INTENT`` is durable again before the next request. (Without it, every
    reminder waiting out a throttle at a crash was recorded ``unknown``, never sent.)"""
    world = World()
    fid, record = throttled_once(world)

    async def main() -> None:
        executor_in(world)
        world.deliver([Msg(0, 10, record)])
        for expected in (INTENT, REFUSED, INTENT):
            await until(lambda mark=expected: world.log[-1] == ("marks sent", [(fid, mark)]))
            world.ack_marks()
        await until(lambda: world.ledger)
        marks = [e[1][0][1] for e in world.log if e[0] == "marks sent"]
        assert marks == [INTENT, REFUSED, INTENT]
        attempts = [i for i, e in enumerate(world.log) if e[0] == "attempt"]
        refused = world.log.index(("marks written", [(fid, REFUSED)], range(501, 502)))
        again = world.log.index(("marks written", [(fid, INTENT)], range(502, 503)))
        assert attempts[0] < refused < again < attempts[1], world.log

    asyncio.run(main())


def test_an_email_waiting_out_a_refusal_sends_nothing_once_its_partition_is_revoked():
    """The run started before the revocation finishes, but its next attempt would need a new
    intent, which the new owner (its done table recovered already) would never see: it stops
    there, its record left uncommitted for the new owner, which finds ``REFUSED`` and sends."""
    world = World()
    fid, record = throttled_once(world)

    async def main() -> None:
        executor = executor_in(world)
        world.deliver([Msg(0, 10, record)])
        for expected in (INTENT, REFUSED):
            await until(lambda mark=expected: world.log[-1] == ("marks sent", [(fid, mark)]))
            if expected == REFUSED:
                executor.revoke({0})
            world.ack_marks()
        await until(lambda: executor.active == 0)

    asyncio.run(main())
    assert [e for e in world.log if e[0] == "attempt"] == [("attempt", fid)], "sent again"
    assert not world.ledger, "nothing recorded: the record is the new owner's"


def test_a_record_of_a_done_fire_id_is_resolved_without_a_run():
    world = World()
    fid = fire_id("job-d", SLOT)
    world.rows[fid.encode()] = b"succeeded"

    async def main() -> None:
        executor = executor_in(world)
        world.deliver([Msg(0, 10, fired_record("job-d")), Msg(0, 11, fired_record("job-d"))])
        await until(lambda: executor.taken.commit_point(0) == 12)
        assert not any(event == "attempt" for event, _ in world.log)
        assert executor.replays == 2

    asyncio.run(main())


def test_a_run_that_finished_while_its_partition_was_away_is_not_run_again_on_its_return():
    """Issue 42's controller kill: the coordinator expired a live worker's session, and the worker
    rejoined and got its partitions back within a second. A run that finished in between had its
    done mark acknowledged while the partition was not the worker's, past the end its recovery
    had read; the fired record, never committed, was read again and run a second time."""
    world = World()
    fid = fire_id("job-w", SLOT)

    async def main() -> None:
        executor = executor_in(world)
        world.deliver([Msg(0, 10, fired_record("job-w"))])
        await until(lambda: world.ledger)
        world.ack_ledger()
        await until(lambda: world.marks)
        executor.revoke({0})
        world.ack_marks()  # the broker has the mark; partition 0 is away
        await until(lambda: not executor.marks.pending)
        assert world.rows == {}, "not this worker's RocksDB to write while away"
        executor.assign({0})  # its recovery ended before the mark was acknowledged
        assert world.rows == {fid.encode(): b"succeeded"}
        world.deliver(Assigned({0: 10}))
        world.deliver([Msg(0, 10, fired_record("job-w"))])  # read again from the commit
        await until(lambda: executor.replays == 1)
        assert [event for event in world.log if event[0] == "attempt"] == [("attempt", fid)]

    asyncio.run(main())


def test_a_mark_acknowledged_away_does_not_overwrite_what_the_recovery_brought():
    world = World()
    marks = DoneMarks(world, world, CHANGELOG)
    marks.acked_away[0] = [(b"job-x@1", b"intent")]
    world.rows[b"job-x@1"] = b"unknown"  # another owner resolved it meanwhile
    marks.assign({0})
    assert world.rows == {b"job-x@1": b"unknown"} and marks.acked_away == {}


def test_a_begun_runs_newer_mark_acknowledged_away_replaces_the_recovered_one():
    world = World()
    marks = DoneMarks(world, world, CHANGELOG)
    marks.acked_away[0] = [(b"job-e@1", REFUSED), (b"job-f@1", INTENT), (b"job-g@1", INTENT)]
    world.rows.update({b"job-e@1": INTENT, b"job-f@1": REFUSED, b"job-g@1": b"succeeded"})
    marks.assign({0})
    assert world.rows == {b"job-e@1": REFUSED, b"job-f@1": INTENT, b"job-g@1": b"succeeded"}


def test_an_emails_outcome_acknowledged_away_replaces_its_recovered_intent():
    """The intent was durable while the partition was held, its outcome acknowledged while it
    was away: the recovery brought the intent, and the record read again would be resolved
    ``unknown`` over the send's real outcome."""
    world = World()
    marks = DoneMarks(world, world, CHANGELOG)
    marks.acked_away[0] = [(b"job-e@1", b"succeeded")]
    world.rows[b"job-e@1"] = INTENT
    marks.assign({0})
    assert world.rows == {b"job-e@1": b"succeeded"}


def test_a_revoked_partitions_waiting_slots_are_dropped_and_its_records_not_taken():
    world = World()

    async def main() -> None:
        executor = executor_in(world)
        executor.sort([Msg(0, 10, fired_record("job-r"))])  # waiting, not started yet
        executor.take_turn()
        assert len(executor.waiting) == 1
        executor.revoke({0})
        assert world.log[-1] == ("revoke", [0])
        world.deliver([Msg(0, 11, fired_record("job-s"))])  # read before the revocation
        for _ in range(50):
            await asyncio.sleep(0)
        assert not any(event == "attempt" for event, _ in world.log)
        assert len(executor.waiting) == 0 and executor.in_flight == {}
        assert executor.taken.commit_point(0) is None, "nothing of it is committed from here"

    asyncio.run(main())


def test_a_small_tenants_record_read_behind_a_spike_is_taken_up_in_the_first_turn():
    """The victim of issue 39: its slot was decided last in a 100k burst and read behind it."""
    world = World()

    async def main() -> None:
        executor = executor_in(world)
        spike = [Msg(0, 10 + i, fired_record(f"spike-{i}")) for i in range(500)]
        executor.sort([*spike, Msg(0, 510, fired_record("small", tenant="small"))])
        executor.take_turn()
        assert sorted(executor.waiting.tenants()) == ["bench", "small"]
        assert len(executor.waiting) == TURN + 1

    asyncio.run(main())


def test_an_older_epoch_after_a_newer_one_is_fenced_in_read_order_whatever_the_turns():
    world = World()

    async def main() -> None:
        executor = executor_in(world)
        executor.sort([Msg(0, 10, fired_record("a", epoch=5)),
                       Msg(0, 11, fired_record("b", tenant="other", epoch=4))])  # a zombie's
        while executor._turns:
            executor.take_turn()
        assert executor.waiting.tenants() == ["bench"]
        assert executor.fence.rejected == 1
        assert executor.taken.commit_point(0) == 10, "the fenced record is resolved, not a"

    asyncio.run(main())


def test_a_region_without_its_lease_runs_nothing_until_it_holds_one():
    from tests.unit.fakes import Lease

    world = World()
    lease = Lease(epoch=None)
    fid = fire_id("job-l", SLOT)

    async def main() -> None:
        executor_in(world, lease)
        world.deliver([Msg(0, 10, fired_record("job-l"))])
        for _ in range(500):  # turns of the loop: the slot is queued, and waits
            await asyncio.sleep(0)
        assert [e for e in world.log if e[0] != "assign"] == [], world.log
        lease.grant(2)
        await until(lambda: world.ledger)
        assert ("attempt", fid) in world.log

    asyncio.run(main())


def test_a_reminder_asked_before_a_deposed_regions_lease_ended_is_unknown_never_sent():
    from tests.unit.fakes import Lease

    world = World()
    fid = fire_id("job-h", SLOT)

    async def main() -> None:
        executor_in(world, Lease(epoch=2, horizon_ms=SLOT))  # asked at SLOT: inherited
        world.deliver([Msg(0, 10, fired_record("job-h", EMAIL))])
        await until(lambda: world.ledger)
        world.ack_ledger()
        await until(lambda: world.marks)
        assert ("attempt", fid) not in world.log
        assert world.log[-1] == ("marks sent", [(fid, b"unknown")])

    asyncio.run(main())

    world = World()  # asked after the horizon: this region's to send, intent first
    fid = fire_id("job-n", SLOT)

    async def after() -> None:
        executor_in(world, Lease(epoch=2, horizon_ms=SLOT - 1))
        world.deliver([Msg(0, 10, fired_record("job-n", EMAIL))])
        await until(lambda: world.marks)
        assert world.log[-1] == ("marks sent", [(fid, INTENT)])

    asyncio.run(after())


def test_a_tenant_held_by_its_quota_is_dispatched_when_its_next_token_is_due():
    """Nothing else wakes the dispatcher then (no slot arrives, no run ends): it sleeps until
    the held tenant's next token, not a whole ``BACKLOG_EVERY_S``."""
    world = World()
    now = [SLOT + 10]
    attempts = lambda: sum(event == "attempt" for event, _ in world.log)  # noqa: E731

    async def main() -> None:
        # 2/s with one of the jobs topic's partitions held: max_fires_per_s = 2 x partitions
        executor = executor_in(world, clock=lambda: now[0],
                               fires_per_s=lambda tenant: 2 * PARTITIONS)
        assert executor.idle_s() == BACKLOG_EVERY_S
        world.deliver([Msg(0, 10 + i, fired_record(f"job-{i}")) for i in range(3)])
        await until(lambda: attempts() == 2)
        for _ in range(50):
            await asyncio.sleep(0)
        assert attempts() == 2, "a second's burst (2) and no more"
        assert executor.waiting.next_token_ms == now[0] + 501
        assert executor.idle_s() == 0.501
        now[0] += 501
        executor.wake()
        await until(lambda: attempts() == 3)
        assert executor.idle_s() == BACKLOG_EVERY_S, "no tenant held: the backlog's own pace"

    asyncio.run(main())


QUIET_SMS = {"type": "sms", "sms_to": "+15551234567", "sms_body": "take your pill",
             "sms_quiet_start": "21:00", "sms_quiet_end": "08:00",
             "sms_quiet_timezone": "America/New_York"}
NY_MORNING = SLOT + 5 * 3_600_000  # SLOT is 03:00 in New York: 08:00 there, the window's end


def test_a_text_whose_run_comes_inside_its_quiet_hours_is_expired_not_sent():
    """The executor's guard (``quiet_hours.refused_at_run``): a record that reaches its run
    inside the window (a backlog, a trigger, a re-drive) is expired with the reason, and
    nothing is attempted (the next test runs one after the window)."""
    world = World()
    fid = fire_id("night", SLOT)

    async def main() -> None:
        executor_in(world)  # its clock: SLOT + 10, 03:00 in New York
        world.deliver([Msg(0, 10, fired_record("night", QUIET_SMS))])
        await until(lambda: world.ledger)
        assert ("attempt", fid) not in world.log
        ((topic, value),) = world.sent
        entry = codec().decode(value)
        assert topic == LEDGER.name and entry["decision"] == "expired_stale"
        assert entry["outcome"] == "not_run"
        assert entry["reason"] == ("quiet_hours: its run came inside them (they end at "
                                   "2027-01-15T08:00-05:00); not sent")

    asyncio.run(main())


def test_a_held_texts_run_records_held_quiet_hours_with_the_hour_it_was_held_until():
    from streams.scheduling import quiet_hours

    world = World()
    fid = fire_id("held", SLOT)
    state = schedule_state()
    j = codec().decode(job("held", "0 * * * * *", SLOT - 60_000, max_lateness_s=43200,
                           target=QUIET_SMS))
    state.emit_fired(0, j, fid, SLOT, quiet_hours.HELD, NY_MORNING + 40)

    async def main() -> None:
        executor_in(world, clock=lambda: NY_MORNING + 50)
        world.deliver([Msg(0, 10, state._emitter.values[0])])
        await until(lambda: world.marks)  # a text's intent, durable before its attempt
        world.ack_marks()
        await until(lambda: world.ledger)
        assert ("attempt", fid) in world.log
        entry = codec().decode(world.sent[0][1])
        assert entry["decision"] == quiet_hours.HELD and entry["outcome"] == "succeeded"
        assert entry["reason"] == "quiet_hours: held until 2027-01-15T08:00-05:00"

    asyncio.run(main())


class Throttled:
    """A target throttled ``times`` times, then ``then`` (the attempts' order in ``calls``)."""

    def __init__(self, times: int, then: CallResult) -> None:
        self.times, self.then, self.calls = times, then, 0

    async def attempt(self, fired: dict[str, Any]) -> CallResult:
        self.calls += 1
        if self.calls <= self.times:
            return CallResult(False, None, "throttled: ThrottlingException: slow down",
                              throttled=True)
        return self.then


def attempts_with(target: Any, monkeypatch: Any, run_by_ms: int | None, now: list[int],
                  max_attempts: int = 3) -> tuple[CallResult, int, list[float]]:
    """``Executor.attempts`` of a fired sms record against ``target``, its sleeps recorded and
    moving the clock ``now`` instead of waiting."""
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += int(seconds * 1000)
        await real_sleep(0)

    fired = codec().decode(fired_record("job-t", {"type": "sms", "sms_to": "+15551234567",
                                                  "sms_body": "hi"}))
    fired.update(run_by_ms=run_by_ms, retry_max_attempts=max_attempts)

    async def main() -> tuple[CallResult, int]:
        world = World()  # not started: no task of its own sleeps meanwhile
        executor = Executor(DoneMarks(world, world, CHANGELOG), target, world, world, Gate(),
                            clock=lambda: now[0], partitions=PARTITIONS)
        monkeypatch.setattr(asyncio, "sleep", sleep)
        try:
            return await executor.attempts(fired)
        finally:
            monkeypatch.setattr(asyncio, "sleep", real_sleep)

    result, attempts = asyncio.run(main())
    return result, attempts, slept


def test_throttling_is_retried_with_backoff_past_max_attempts_until_it_is_sent(monkeypatch):
    target = Throttled(10, CallResult(True, None, None, message_id="m-1"))
    result, attempts, slept = attempts_with(target, monkeypatch, SLOT + 3_600_000, [SLOT])
    assert result.ok and target.calls == 11 and attempts == 11, "each call is on the ledger"
    assert len(slept) == 10 and slept[-1] > slept[0], "backing off"


def test_throttling_ends_at_the_slots_deadline_as_a_failure_that_says_so(monkeypatch):
    now = [SLOT]
    target = Throttled(1_000, CallResult(True, None, None))
    result, attempts, slept = attempts_with(target, monkeypatch, SLOT + 120_000, now)
    assert not result.ok and "throttled until the slot's deadline" in (result.error or "")
    assert now[0] <= SLOT + 120_000 and target.calls == attempts == len(slept) + 1 > 3


def test_a_throttled_record_without_a_deadline_counts_its_attempts(monkeypatch):
    target = Throttled(1_000, CallResult(True, None, None))
    result, attempts, _ = attempts_with(target, monkeypatch, None, [SLOT])
    assert not result.ok and result.throttled and target.calls == attempts == 3
