"""A slot of a job, from its schedule to the fired record: pure functions, no broker, no clock.

Where a job's next slot goes in a due index (``index_job``, ``schedule_next``, ``due_ms`` with
the job's jitter), and a slot's preparation (``prepare``): everything firing it needs that does
not depend on the moment it is reached, computed ahead of a spike (``streams.scheduling.deciding``).
"""

from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple, Protocol

from streams.runtime.clock import now_ms
from streams.runtime.codec import RecordTemplate, codec
from streams.scheduling import misfire, quiet_hours, schedule
from streams.scheduling.due_index import DueIndex


class JobStore(Protocol):
    """The jobs table as the scheduler reads it: per partition, without faust's mapping layers."""

    def get_in(self, partition: int, key: bytes) -> bytes | None: ...
    def items_in(self, partition: int) -> Any: ...


@cache
def fired_template() -> RecordTemplate:
    """The fired record around the fields only known when a slot fires (``streams.runtime.codec``)."""
    return codec().template("Fired", ("fired_ms", "decision", "epoch"))


class Prepared(NamedTuple):
    """What firing a staged slot needs, computed before it fell due."""

    slot: int
    job: dict[str, Any]
    following: int | None
    fid: str
    done: bool  # in the done table when prepared
    prepared_ms: int
    frozen: tuple[bytes, bytes]  # the fired record around its last-moment fields
    fired_until: int | None  # reached by then, the slot fires (misfire.fired_until)
    following_due: int | None  # when the following slot falls due (its jitter applied)
    # reached by then, the spike lane fires it: ``fired_until`` if nothing but the moment is
    # left to decide (not done, prepared before its slot, no quiet hours), else -1 (``_fire``
    # decides it)
    lane_until: int
    max_lateness_ms: int  # the reconciler's bound for the slot (at least a second)

    def done_still_known(self) -> bool:
        """Prepared before its nominal time, the slot could not have run since (nobody fires a
        slot early and a fenced-off owner's records are rejected), so ``done`` still holds;
        prepared later (catch-up, takeover), a previous owner's fire may have landed since."""
        return self.prepared_ms < self.slot


def index_job(index: DueIndex, job: dict[str, Any], mark: int | None,
              owed: int | None = None) -> None:
    """Index ``job``'s first slot after its update, or its first slot not yet decided by a
    previous owner whose fired-through ``mark`` is later.

    ``owed``: the slot the live index owed the job when this revision arrived. One due before
    the update and still a slot of the new schedule stays owed: a text held by its quiet hours
    (indexed at their end), or a slot due and not yet reached, would otherwise get no decision
    at all (every slot gets one). Only the live index knows it: a standby's entries lag.

    The mark is a due time and a jittered slot falls due up to ``jitter_s`` after its
    nominal time, so the slots nominally in the last ``jitter_s`` before the mark are
    owed too unless they were due by the mark.

    A text with quiet hours may have a slot due by the mark and still owed: held to the end of
    the window the mark is in, it was indexed there, past the mark. Those are owed from
    ``quiet_hours.held_since_ms`` on (re-derived from the job and the mark: a held slot is
    recorded nowhere until it is sent)."""
    after = job["updated_ms"] - 1
    at = job["schedule"]["at_ms"]
    if at is not None:  # a one-off may be set in the (recent) past: it is still owed
        after = min(after, at - 1)
    if owed is not None and owed <= after \
            and schedule.next_after(job["schedule"], job["job_id"], owed - 1) == owed:
        after = owed - 1
    if mark is not None:
        mark = owed_through(job, mark)
        after = max(mark - job["jitter_s"] * 1000, after)
    slot = schedule.next_after(job["schedule"], job["job_id"], after)
    while mark is not None and slot is not None and due_ms(job, slot) <= mark:
        slot = schedule.next_after(job["schedule"], job["job_id"], slot)
    schedule_next(index, job, slot)


def owed_through(job: dict[str, Any], mark: int) -> int:
    """The fired-through ``mark`` as far as ``job`` goes: below its slots that quiet hours may
    hold past the mark (``quiet_hours.held_since_ms``), else the mark."""
    window = quiet_hours.window_of(job["target"])
    if window is None or job["paused"]:
        return mark
    since = quiet_hours.held_since_ms(window, mark, job["max_lateness_s"] * 1000,
                                      skip=job["misfire_policy"] == "skip")
    return mark if since is None else min(mark, since - 1)


def schedule_next(index: DueIndex, job: dict[str, Any], slot: int | None) -> None:
    if slot is None:
        index.remove(job["job_id"])
        return
    index.set(job["job_id"], slot, due_ms(job, slot))


def due_ms(job: dict[str, Any], slot: int) -> int:
    """When ``slot`` falls due: its nominal time plus the job's jitter for it."""
    if job["jitter_s"] <= 0:  # the fire id is only needed to derive the jitter
        return slot
    return slot + schedule.jitter_ms(schedule.fire_id(job["job_id"], slot), job["jitter_s"])


def last_due_after(job: dict[str, Any], now: int) -> bool:
    """Whether a slot of ``job`` still falls due at or after ``now``. A one-off written after its
    time falls due when written (``index_job`` owes it from then)."""
    sched, job_id = job["schedule"], job["job_id"]
    at = sched["at_ms"]
    if at is not None:
        due = max(due_ms(job, at), job["updated_ms"])
        return max(due, held_to_ms(job, at, due)) >= now
    # jitter only delays (by less than jitter_s): a slot nominally before now - jitter_s is
    # due before now, and one nominally at or after now is due at or after it, so the loop
    # looks at the slots in the last jitter_s at most
    slot = schedule.next_after(sched, job_id, now - job["jitter_s"] * 1000 - 1)
    while slot is not None:
        if due_ms(job, slot) >= now:
            return True
        slot = schedule.next_after(sched, job_id, slot)
    return False


def held_to_ms(job: dict[str, Any], slot: int, due: int) -> int:
    """When a text's slot due at ``due`` is sent: the end of the quiet hours it falls due in,
    when they hold it (``deciding.quiet_slot``: not ``skip``, and they end before its
    deadline), else ``due``. A one-off text held overnight is not ``completed`` at 22:00."""
    window = quiet_hours.window_of(job["target"])
    if window is None:
        return due
    held = quiet_hours.decide(window, due, slot + job["max_lateness_s"] * 1000,
                              job["misfire_policy"] == "skip")
    return held.until_ms if held.verdict is quiet_hours.Verdict.HOLD and held.until_ms else due


def job_state(job: dict[str, Any], now: int) -> str:
    """``completed`` once no slot of the job is left to fall due (a one-off past its time, a
    schedule past its ``end``), else ``paused`` or ``active``. Derived from the schedule and the
    clock, not the ledger: the decision of the last slot is recorded moments after its due time
    (its run, for a slot that runs, later still), and a paused job's remaining slots are
    recorded ``skipped_paused``, so a paused job also completes."""
    if not last_due_after(job, now):
        return "completed"
    return "paused" if job["paused"] else "active"


def prepare(job: dict[str, Any], slot: int, done: bool, prepared_ms: int | None = None
            ) -> Prepared:
    """A slot's preparation: everything firing it needs that does not depend on the moment it
    is reached. ``done``: whether the done table had the slot's fire id just now, which is
    ``prepared_ms`` (default: now)."""
    fid = schedule.fire_id(job["job_id"], slot)
    following = schedule.next_after(job["schedule"], job["job_id"], slot)
    at = now_ms() if prepared_ms is None else prepared_ms
    until = misfire.fired_until(slot_ms=slot, max_lateness_s=job["max_lateness_s"],
                                paused=job["paused"])
    return Prepared(slot, job, following, fid, done, at, fired_frozen(job, fid, slot), until,
                    None if following is None else due_ms(job, following),
                    until if until is not None and not done and at < slot
                    and quiet_hours.window_of(job["target"]) is None else -1,
                    lateness_bound_ms(job))


def lateness_bound_ms(job: dict[str, Any]) -> int:
    """How late the reconciler lets a fired slot of ``job`` go undecided before expiring it:
    the job's max lateness, and at least a second, so a job allowing no lateness is not expired
    the moment it fires."""
    return max(job["max_lateness_s"], 1) * 1000


def fired_frozen(job: dict[str, Any], fid: str, slot: int, redrives: int = 0,
                 run_from_ms: int | None = None, asked_ms: int | None = None
                 ) -> tuple[bytes, bytes]:
    """A slot's fired record, encoded but for fired_ms, decision and epoch. Its run is due by
    ``max_lateness_s`` after the slot, or after ``run_from_ms`` for a slot a user asked for now
    (a trigger, a backfill of yesterday's slots): those are meant to run however old they are.
    ``asked_ms``: when a backfill asked for it (the API's time), which a promoted region's
    executor compares with the deposed region's lease (``streams.runtime.region``)."""
    return fired_template().freeze({
        "fire_id": fid, "job_id": job["job_id"], "tenant": job["tenant"],
        "job_revision": job["revision"], "nominal_ms": slot, "target": job["target"],
        "overlap": job["overlap"], "retry_max_attempts": job["retry_max_attempts"],
        "retry_initial_backoff_s": job["retry_initial_backoff_s"],
        "retry_max_backoff_s": job["retry_max_backoff_s"], "redrives": redrives,
        "run_by_ms": max(slot, run_from_ms or slot) + job["max_lateness_s"] * 1000,
        "asked_ms": asked_ms,
    })
