"""A reminder on both channels (``streams.execution.reminders``, ``Executor.run_reminder``): each
channel sent at most once under its own intent and recorded as its own ledger entry; a fallback
passes on only for its recipient's sake; a crash between the channels sends neither again."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams.execution import reminders
from streams.execution.targets import CallResult
from streams.runtime.codec import codec
from streams.scheduling.schedule import fire_id
from streams.topology import DLQ, INTENT, LEDGER
from tests.unit.execution.test_executor import SLOT, Msg, World, executor_in, fired_record

SENT = CallResult(True, None, None, message_id="m-1")
SUPPRESSED = CallResult(False, None, "suppressed: opted out", final=True,
                        note="not sent: number suppressed", suppressed=True)
UNKNOWN = CallResult(False, None, "unknown: timed out", final=True, unknown=True)
FAILED = CallResult(False, None, "permanent: refused", final=True)
# a text's done mark as a run writes it once sent (``reminders.Recorded``)
SENT_MARK = reminders.Recorded("succeeded", "fired", None, 1, None, None, "m-1").encode()


def reminder(channels: tuple[str, ...] = ("sms", "email"), deliver: str = "all",
             quiet: bool = False) -> dict[str, Any]:
    target: dict[str, Any] = {
        "type": "reminder", "email_from": "a@example.com", "email_to": "b@example.com",
        "subject": "Dentist", "text": "at 9", "sms_to": "+15551234567", "sms_body": "Dentist at 9",
        "sms_origination": "+18005550100", "reminder_channels": list(channels),
        "reminder_deliver": deliver}
    if quiet:  # a window around the whole day: the text is always inside it
        target.update(sms_quiet_start="00:00", sms_quiet_end="23:59",
                      sms_quiet_timezone="UTC")
    return target


# -- the decisions ---------------------------------------------------------------------------------
def test_a_channels_id_is_never_another_slots():
    fid = fire_id("job-a", SLOT)
    assert reminders.channel_id(fid, "sms") == f"{fid}#sms" and fid.endswith("Z")


def test_all_sends_every_channel_whatever_the_one_before_did():
    for verdict in ("succeeded", "failed", "unknown", "suppressed"):
        assert reminders.goes_on("all", [verdict])


@pytest.mark.parametrize(("verdict", "goes_on"), [
    ("suppressed", True), (reminders.QUIET, True), ("succeeded", False), ("failed", False),
    ("unknown", False), ("not_run", False)])
def test_a_fallback_passes_on_only_for_its_recipients_sake(verdict, goes_on):
    assert reminders.goes_on("fallback", []) is True, "the preferred channel always goes"
    assert reminders.goes_on("fallback", [verdict]) is goes_on


def test_the_slots_outcome_is_its_best_channels():
    assert reminders.slot_outcome(["suppressed", "succeeded"]) == "succeeded"
    assert reminders.slot_outcome(["failed", "unknown"]) == "unknown"
    assert reminders.slot_outcome([reminders.QUIET, "failed"]) == "failed"
    assert reminders.slot_outcome(["suppressed", reminders.QUIET]) == "suppressed"
    assert reminders.slot_outcome([reminders.QUIET, reminders.NOT_NEEDED]) == "not_run"


def test_a_channel_is_sent_as_a_lone_email_or_text_of_the_same_slot():
    fired = {"fire_id": "j@x", "target": reminder()}
    sent = reminders.channel_fired(fired, "email")  # type: ignore[arg-type]
    assert sent["target"]["type"] == "email" and sent["fire_id"] == "j@x"
    assert fired["target"]["type"] == "reminder", "the slot's own record is left as it was"
    assert reminders.channels_of(reminder()) == ["sms", "email"]  # type: ignore[arg-type]


# -- the executor ----------------------------------------------------------------------------------
class Channels(World):
    """A world whose target answers each channel with its own result."""

    def __init__(self, **results: CallResult) -> None:
        super().__init__()
        self.results = results
        self.attempted: list[str] = []

    async def attempt(self, fired: dict[str, Any]) -> CallResult:
        kind = fired["target"]["type"]
        self.attempted.append(kind)
        self.log.append(("attempt", fired["fire_id"], kind))
        return self.results.get(kind, SENT)


async def settle(world: World, condition: Any, turns: int = 2_000) -> None:
    """Acknowledge every write as it comes until ``condition`` holds."""
    for _ in range(turns):
        world.ack_ledger()
        world.ack_marks()
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the executor never got there")


def entries(world: World) -> dict[str, dict[str, Any]]:
    """The ledger entries produced, the newest per record id."""
    return {e["record_id"]: e for e in (codec().decode(v) for topic, v in world.sent
                                        if topic == LEDGER.name)}


def run(world: World, target: dict[str, Any], *, rows: dict[bytes, bytes] | None = None,
        clock: Any = None) -> tuple[str, Any]:
    fid = fire_id("job-r", SLOT)
    world.rows.update(rows or {})

    async def main() -> Any:
        executor = executor_in(world, **({"clock": clock} if clock else {}))
        world.deliver([Msg(0, 10, fired_record("job-r", target))])
        await settle(world, lambda: executor.done_mark(0, fid) not in (None, *reminders_begun()))
        return executor

    return fid, asyncio.run(main())


def reminders_begun() -> tuple[bytes, ...]:
    from streams.topology import BEGUN
    return tuple(BEGUN)


def test_both_channels_are_sent_each_under_its_own_intent_and_entry():
    world = Channels()
    fid, executor = run(world, reminder())
    assert world.attempted == ["sms", "email"]
    marks = [m for entry in world.log if entry[0] == "marks sent" for m in entry[1]]
    assert marks.index((f"{fid}#sms", INTENT)) < world.log.index(("attempt", fid, "sms"))
    assert marks.index((f"{fid}#email", INTENT)) < world.log.index(("attempt", fid, "email"))
    [sms_done] = [i for i, (k, v) in enumerate(marks) if k == f"{fid}#sms" and v != INTENT]
    assert sms_done < marks.index((f"{fid}#email", INTENT))
    assert reminders.Recorded.decode(marks[sms_done][1]).verdict == "succeeded"
    done_at = world.log.index(("marks sent", [marks[sms_done]]))
    entry_at = world.log.index((f"{LEDGER.name} sent", f"{fid}#sms"))
    assert done_at < entry_at, "the channel's mark first: its entry is written again from it"
    found = entries(world)
    assert set(found) == {f"{fid}#sms", f"{fid}#email"}, "an entry per channel, none for the slot"
    assert [(e["channel"], e["outcome"], e["fire_id"], e["message_id"])
            for e in found.values()] == [("sms", "succeeded", fid, "m-1"),
                                         ("email", "succeeded", fid, "m-1")]
    keys = [entry[1] for entry in world.log if entry[0] == f"{LEDGER.name} sent"]
    assert keys == [f"{fid}#sms", f"{fid}#email"], "keyed by record id: compaction keeps both"
    assert executor.done_mark(0, fid) == b"succeeded"


def test_a_fallback_sends_its_second_channel_only_when_the_first_is_suppressed():
    world = Channels(sms=SUPPRESSED)
    fid, _ = run(world, reminder(deliver="fallback"))
    assert world.attempted == ["sms", "email"]
    found = entries(world)
    assert found[f"{fid}#sms"]["outcome"] == "suppressed"
    assert found[f"{fid}#email"]["outcome"] == "succeeded"

    world = Channels()
    fid, executor = run(world, reminder(deliver="fallback"))
    assert world.attempted == ["sms"], "the text was sent: no email"
    email = entries(world)[f"{fid}#email"]
    assert (email["outcome"], email["reason"]) == (
        "not_run", "fallback: not needed, the sms channel ended succeeded")
    assert executor.done_mark(0, fid) == b"succeeded"


@pytest.mark.parametrize("first", [UNKNOWN, FAILED], ids=["unknown", "failed"])
def test_a_fallback_never_passes_on_a_send_that_may_have_arrived_or_failed(first):
    world = Channels(sms=first)
    fid, _ = run(world, reminder(deliver="fallback"))
    assert world.attempted == ["sms"]
    assert entries(world)[f"{fid}#email"]["outcome"] == "not_run"


def test_a_failed_channel_is_dead_lettered_as_that_channel():
    world = Channels(email=FAILED)
    fid, executor = run(world, reminder())
    [letter] = [codec().decode(v) for topic, v in world.sent if topic == DLQ.name]
    assert letter["target"]["type"] == "email" and letter["fire_id"] == fid
    assert (f"{DLQ.name} sent", fid) in world.log, "keyed by the fire id, as the topic says"
    assert executor.done_mark(0, fid) == b"succeeded", "the text was sent"


def test_a_text_inside_its_quiet_hours_is_not_run_and_a_fallback_emails_instead():
    world = Channels()
    fid, _ = run(world, reminder(deliver="fallback", quiet=True))
    assert world.attempted == ["email"]
    sms = entries(world)[f"{fid}#sms"]
    assert sms["outcome"] == "not_run" and sms["reason"].startswith("quiet_hours:")
    assert entries(world)[f"{fid}#email"]["outcome"] == "succeeded"


def test_after_a_crash_a_channel_begun_is_unknown_and_one_done_is_not_sent_again():
    fid = fire_id("job-r", SLOT)
    world = Channels()
    # the text was sent and marked; the email's intent was written, then the worker died
    _, executor = run(world, reminder(), rows={f"{fid}#sms".encode(): SENT_MARK,
                                               f"{fid}#email".encode(): INTENT})
    assert world.attempted == [], "neither channel is sent again"
    found = entries(world)
    assert found[f"{fid}#email"]["outcome"] == "unknown"
    assert (found[f"{fid}#sms"]["outcome"], found[f"{fid}#sms"]["message_id"]) == (
        "succeeded", "m-1"), "the text's entry written again as its mark has it"
    assert executor.done_mark(0, fid) == b"succeeded"


def test_after_a_crash_a_fallbacks_done_verdict_decides_as_it_did():
    fid = fire_id("job-r", SLOT)
    world = Channels()
    # the text was inside its quiet hours then; now it is not: the email still goes, no text
    run(world, reminder(deliver="fallback"), rows={f"{fid}#sms".encode(): reminders.Recorded(
        reminders.QUIET, "fired", "quiet_hours: until 08:00").encode()})
    assert world.attempted == ["email"]


def test_a_crash_between_a_channels_mark_and_its_entry_loses_neither_it_nor_the_fallback():
    """The text was refused for a suppressed number and its mark written; the worker died
    before its entry: the run again writes the entry from the mark, ``suppressed`` (not
    ``unknown``), and the fallback email the reminder is owed goes."""
    fid = fire_id("job-r", SLOT)
    world = Channels()
    mark = reminders.Recorded("suppressed", "fired", "not sent: number suppressed", 1)
    run(world, reminder(deliver="fallback"), rows={f"{fid}#sms".encode(): mark.encode()})
    assert world.attempted == ["email"]
    found = entries(world)
    assert (found[f"{fid}#sms"]["outcome"], found[f"{fid}#sms"]["reason"]) == (
        "suppressed", "not sent: number suppressed")
    assert found[f"{fid}#email"]["outcome"] == "succeeded"


def test_a_reminders_next_channel_is_not_begun_once_its_partition_is_revoked():
    """A run started before a revocation finishes, but begins no send after it: the new owner
    recovered the done table before this worker's next intent, would not see it, and would
    send the channel too. The text in flight at the revocation is left as it was."""
    fid = fire_id("job-r", SLOT)

    class Held(Channels):
        def __init__(self) -> None:
            super().__init__()
            self.release = asyncio.Event()

        async def attempt(self, fired: dict[str, Any]) -> CallResult:
            result = await super().attempt(fired)
            await self.release.wait()
            return result

    world = Held()

    async def main() -> Any:
        executor = executor_in(world)
        world.deliver([Msg(0, 10, fired_record("job-r", reminder()))])
        await settle(world, lambda: world.attempted == ["sms"])
        executor.revoke({0})
        world.release.set()
        await settle(world, lambda: executor.active == 0)
        return executor

    executor = asyncio.run(main())
    assert world.attempted == ["sms"], "the email was begun after the revocation"
    marks = [m for entry in world.log if entry[0] == "marks sent" for m in entry[1]]
    assert (f"{fid}#email", INTENT) not in marks
    assert executor.done_mark(0, fid) is None, "the slot is left to the next owner"


def test_a_reminder_cut_short_by_a_crash_and_then_expired_keeps_its_channels():
    """The text was sent and marked, the email's intent written, then the worker died; the
    slot's record, read again too late, is expired: the text's entry stands, the email is
    ``unknown`` (never sent), and no slot-wide ``not_run`` row says the reminder never ran."""
    fid = fire_id("job-r", SLOT)
    world = Channels()
    _, executor = run(world, reminder(), rows={f"{fid}#sms".encode(): SENT_MARK,
                                               f"{fid}#email".encode(): INTENT},
                      clock=lambda: SLOT + 10 * 86_400_000)
    assert world.attempted == []
    found = entries(world)
    assert set(found) == {f"{fid}#sms", f"{fid}#email"}, "no slot-wide row"
    assert found[f"{fid}#sms"]["outcome"] == "succeeded"
    assert found[f"{fid}#email"]["outcome"] == "unknown"
    assert executor.done_mark(0, fid) == b"succeeded"

    world = Channels()  # never begun: the slot's one row, as for any expired slot
    _, executor = run(world, reminder(), clock=lambda: SLOT + 10 * 86_400_000)
    [(key, entry)] = entries(world).items()
    assert key == fid and (entry["decision"], entry["channel"]) == ("expired_stale", "reminder")
