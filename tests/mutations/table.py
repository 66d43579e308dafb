"""The one table of mutations: for each guarantee of the README's table, an edit that removes its
mechanism, and the test that must go red without it.

Each edit is ``anchor`` → ``replacement`` in ``path``, the anchor exact text found exactly once
(``tests/unit/test_mutations.py`` checks that on every ``./dev test``, so a refactor that moves
a mechanism fails there until its mutation is anchored again: edit its row here). ``red`` is the
failing assertion the mutation was last seen to cause (docs/testing.md, "Mutation check"), to
compare a run with.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Edit:
    path: str  # the file edited, from the repository's root
    anchor: str  # exact text, found exactly once
    replacement: str


@dataclass(frozen=True)
class Mutation:
    name: str
    guarantee: str  # the README's row, word for word
    edits: tuple[Edit, ...]  # a mechanism kept twice (defence in depth) is removed twice
    tests: tuple[str, ...]  # node ids: at least one must fail
    red: str  # the assertion seen failing (what a run should show again)


def mutation(name: str, guarantee: str, path: str, anchor: str, replacement: str,
             tests: tuple[str, ...], red: str, *more: Edit) -> Mutation:
    """A mutation of one edit (and ``more``)."""
    return Mutation(name, guarantee, (Edit(path, anchor, replacement), *more), tests, red)


MUTATIONS: tuple[Mutation, ...] = (
    mutation(
        "no-redrive", "every slot gets one decision",
        "streams/scheduling/reconciler.py",
        "            if now_ms - item.emitted_ms < self.lag_ms or item.fire_id in in_flight:\n",
        "            if True:  # MUTATION: the reconciler never catches a slot\n",
        ("tests/integration/test_jobs_api.py::test_every_second_job_has_a_ledger_row_per_slot",),
        "condition not met within 240.0s ... undecided: [the held slot]"),
    mutation(
        "done-unread", "a fire id runs once",
        "streams/execution/executor.py",
        "        arrival = classify(self.marks.get(part, fid), self.in_flight.get(fid), (part, offset))\n",
        "        arrival = classify(None, self.in_flight.get(fid),  # MUTATION: done table unread\n"
        "                           (part, offset))\n",
        ("tests/integration/test_jobs_api.py::"
         "test_backfill_runs_missing_slots_once_and_never_repeats_done_ones",),
        "backfilled slots that already ran were run again"),
    mutation(
        "no-done-mark", "replays are safe",
        "streams/execution/executor.py",
        "        self.marks.mark(slot.partition, fid, outcome.encode(),\n",
        "        self.taken.resolve(slot.partition, slot.offset)  # MUTATION: never marked done\n"
        "        (lambda *_: None)(slot.partition, fid, outcome.encode(),\n",
        ("tests/integration/test_operator.py::test_cronstream_replay_of_fired_runs_nothing_twice",),
        "a replayed fired record called the webhook again"),
    mutation(
        "resume-from-now", "no slot lost in a failover",
        "streams/scheduling/partitions.py",
        "            self.fired_through[part] = marks.get(part, 0)\n",
        "            self.fired_through[part] = max(marks.get(part, 0),  # MUTATION: not the mark\n"
        "                                           int(time.time() * 1000))\n",
        ("tests/integration/test_failover.py::test_sigkilled_worker_loses_no_slot",),
        "condition not met ... slots without a decision"),
    mutation(
        "no-send-fence", "zombies fenced",
        "streams/campaigns/ownership.py",
        "    if assignment.state != \"STABLE\":\n        return Ownership.UNSETTLED\n",
        "    return Ownership.OWNED  # MUTATION: the coordinator is never asked\n",
        ("tests/integration/test_send_fence.py::"
         "test_a_member_the_group_moved_on_from_is_fenced",),
        "the zombie was let send"),
    mutation(
        "lease-outlives-session", "zombies fenced",
        "streams/runtime/group_lease.py",
        "        self.clock = LeaseClock(span, span / 2)\n",
        "        self.clock = LeaseClock(span * 100, 0)  # MUTATION: the lease outlives the session\n",
        ("tests/integration/test_group_lease.py::"
         "test_a_member_whose_loop_froze_has_no_lease_once_its_partitions_moved",),
        "the zombie's lease still held"),
    mutation(
        "no-chunk-intent", "at most once per recipient",
        "streams/campaigns/walker.py",
        "        await self.send_chunks.put_acked(key, INTENT)\n",
        "        pass  # MUTATION: no intent before the send\n",
        ("tests/integration/test_campaign_faults.py::test_worker_sigkilled_mid_fanout",),
        "an address was mailed twice"),
    mutation(
        "no-email-intent", "at most once per reminder email or text",
        "streams/execution/executor.py",
        "        await self.marks.put_acked(partition, key, INTENT)\n",
        "        pass  # MUTATION: no intent before the send\n",
        ("tests/integration/test_email_target.py::"
         "test_a_send_with_unknown_outcome_is_not_repeated",),
        "accepted once and never sent again"),
    mutation(
        "no-barrier", "opt-out linearizable",
        "streams/campaigns/admission.py",
        "        await self.barrier.caught_up(part)\n"
        "        if self.barrier.applied.get(part) != seen:  # opt-outs applied (or lifted) while it waited\n"
        "            allowed, opted_out = self.split(part, tenant, emails, chunk[\"vars\"])\n",
        "        pass  # MUTATION: no barrier, no second look at the opt-outs after the wait\n",
        ("tests/integration/test_campaigns.py::"
         "test_suppression_acknowledged_mid_campaign_stops_sends",),
        "mailed this many ms after their opt-outs were acknowledged"),
    mutation(
        "no-cutoff", "stale-send cutoff",
        "streams/campaigns/chunk_verdict.py",
        "    if now > deadline:\n",
        "    if False:  # MUTATION: the deadline never stops a chunk\n",
        ("tests/chaos/test_faults.py::"
         "test_deadline_passing_during_an_outage_expires_the_rest_with_reason",),
        "mailed after the deadline"),
    mutation(
        "once-is-all", "misfire policies",
        "streams/scheduling/misfire.py",
        "    if policy == \"fire_once\" and following_slot_ms is not None and "
        "following_slot_ms <= now_ms:\n",
        "    if False:  # MUTATION: fire_once catches up every missed slot\n",
        ("tests/chaos/test_faults.py::test_workers_down_then_back_apply_misfire_policies",),
        "fire_once ran more than one missed slot"),
    mutation(
        "any-tenant", "tenant isolation",
        "api/routes/jobs.py",
        "        if job is not None and job[\"tenant\"] == tenant:\n",
        "        if job is not None:  # MUTATION: another tenant's job is found\n",
        ("tests/integration/test_tenant_isolation.py::"
         "test_every_job_and_campaign_route_hides_other_tenants_resources",),
        "assert 200 == 404 (another tenant's job answered)"),
    mutation(
        "no-host-cap", "runs shared fairly",
        "streams/execution/dispatch.py",
        "                if self._running.get(host, 0) >= self.per_host:\n",
        "                if False:  # MUTATION: no cap on a host's calls\n",
        ("tests/integration/test_run_isolation.py::"
         "test_a_slow_host_holds_only_its_own_slots_and_their_late_turns_expire",),
        "calls held at once; the limit is"),
    mutation(
        "no-inherit", "no address twice across a region failover",
        "streams/runtime/region.py",
        "    return inherited_hwm is not None and seq <= inherited_hwm\n",
        "    return False  # MUTATION: the deposed region's reservations are not inherited\n",
        ("tests/integration/test_regions.py::"
         "test_unplanned_promotion_mails_no_address_twice_and_loses_no_slot",),
        "addresses mailed twice across the regions"),
    mutation(
        "no-event-dedup", "bounces and complaints suppress",
        "streams/campaigns/bounces.py",
        "    if key in state.seen:\n",
        "    if False:  # MUTATION: a redelivered SES event counts again\n",
        ("tests/integration/test_feedback_at_scale.py::"
         "test_a_20k_campaign_with_bounces_and_complaints_suppresses_each_once",),
        "an event SNS delivered twice suppressed once",
        # and at the edge: the API's memory of the SNS messages it wrote (alone, either one
        # keeps a redelivered event from suppressing twice: the bounces' seen keys alone removed,
        # the test stayed green)
        Edit("api/routes/feedback.py",
             "    if message_id in intake.seen:\n        return {\"written\": 0, \"duplicate\": True}\n",
             "    # MUTATION: a redelivered SNS message is written again\n")),
    mutation(
        "no-retry", "throttling never drops mail",
        "streams/campaigns/walker.py",
        "            if refused and attempt < MAX_THROTTLE_RETRIES and now_ms() < deadline:\n",
        "            if False:  # MUTATION: a throttled chunk is not retried\n",
        ("tests/integration/test_campaign_faults.py::test_ses_throttling_spell_drops_nothing",),
        "Counter({'sent': ..., 'failed': ...}) == {'sent': 100000}"),
    mutation(
        "no-fire-quota", "tenant isolation",
        "streams/execution/fire_quota.py",
        "        entry = self._entry(tenant, now_ms)\n"
        "        if entry.bucket.wait_s(now_ms / 1000) == 0.0:\n",
        "        entry = self._entry(tenant, now_ms)\n        if True:  # MUTATION: no quota\n",
        ("tests/security/test_quotas.py::"
         "test_a_tenant_past_its_fires_per_second_waits_and_its_late_slots_expire_saying_so",),
        "calls in one second"),
)
