"""Issue 28's isolation figures for ``bench.spike``'s webhook spike: whether one tenant's spike,
or one slow host, costs everyone else their run lag.

Pure functions over the receivers' arrivals (fire id, arrival ns) and the ledger's word on each
slot, so they are tested without a stack:

- the **victim**: another tenant's one job firing every second through the spike, calling the
  same receiver (the same host) as the spike; its slots nominally from the spike's second to the
  spike's last arrival, their run lag against the target ``VICTIM_P99_TARGET_MS`` and the ones
  that never arrived (``victim_slots``, ``victim_figures``);
- **fast and slow jobs**: a share of the spike's jobs call a second receiver (another host) that
  answers late; each group's run lag, missing and duplicate arrivals and ledger outcomes
  (``split_slow``, ``group_figures``): the fast ones should keep their run lag.

Each group's figures go into its spike's figures under ``"<group>: <figure>"`` (``prefixed``),
and ``lines`` prints them as one table.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bench.common import percentile
from bench.runs import duplicates, first_arrivals
from streams.scheduling.schedule import fire_id

FAST, SLOW, VICTIM = "fast jobs", "slow jobs", "victim"
GROUPS = (FAST, SLOW, VICTIM)
VICTIM_P99_TARGET_MS = 2_000  # issue 28: another tenant's spike costs a job at most this
VERDICTS = ("succeeded", "failed", "expired_stale")  # the ledger's words on a slot, always shown

SLOTS, RECEIVED, MISSING, DUPLICATES = "slots", "received", "missing", "duplicates"
P50, P99, MAX = "run lag p50 ms", "run lag p99 ms", "run lag max ms"
LEDGER, NO_LEDGER = "ledger outcomes", "slots without a ledger outcome"
TARGET, MET = "run lag p99 target ms", "run lag p99 target met"


def split_slow(ids: list[str], share: float) -> tuple[list[str], list[str]]:
    """(fast, slow): ``round(len(ids) * share)`` of the jobs are slow, spread evenly through
    ``ids`` (their partitions, and so their workers, are the fast ones' too); the rest fast."""
    count = round(len(ids) * share)
    slow_at = {j * len(ids) // count for j in range(count)} if count else set()
    return ([job_id for i, job_id in enumerate(ids) if i not in slow_at],
            [ids[i] for i in sorted(slow_at)])


def verdict(entry: dict[str, Any]) -> str:
    """A ledger entry's word on its slot: ``expired_stale`` when that was the decision (its
    turn to run came after its max lateness; the outcome is then ``not_run``), else the
    outcome (succeeded, failed, ...)."""
    return "expired_stale" if entry["decision"] == "expired_stale" else entry["outcome"]


def verdict_counts(verdicts: dict[str, str], fire_ids: Iterable[str]) -> dict[str, int]:
    """How many of ``fire_ids`` the ledger said each word of (``verdicts``: fire id -> its
    newest entry's ``verdict``); ``VERDICTS`` always shown, 0 or not."""
    counts = dict.fromkeys(VERDICTS, 0)
    for fid in fire_ids:
        if (word := verdicts.get(fid)) is not None:
            counts[word] = counts.get(word, 0) + 1
    return counts


def group_figures(slots: int, lags_ms: list[int], duplicated: int,
                  ledger: dict[str, int]) -> dict[str, object]:
    """One group of a spike's jobs: its slots, run lag of those received (first arrival minus
    nominal), missing and duplicate arrivals, and the ledger's outcomes (``verdict_counts``)."""
    return {SLOTS: slots, RECEIVED: len(lags_ms), MISSING: slots - len(lags_ms),
            DUPLICATES: duplicated, **_lags(lags_ms), LEDGER: ledger,
            NO_LEDGER: slots - sum(ledger.values())}


def victim_slots(job_id: str, start_ms: int, end_ms: int) -> dict[str, int]:
    """The victim job's slots (one a second, on the second) nominally from ``start_ms`` to
    ``end_ms``, both included: fire id -> nominal ms."""
    first = -(-start_ms // 1000) * 1000
    return {fire_id(job_id, at): at for at in range(first, end_ms + 1, 1000)}


def victim_figures(arrivals: list[tuple[str, int]], expected: dict[str, int]
                   ) -> dict[str, object]:
    """The victim's slots ``expected`` (``victim_slots``) as the receiver saw them (its arrivals
    of other slots are left out): run lag of each received one, at its first arrival, against
    ``VICTIM_P99_TARGET_MS``; the missing ones and the duplicates."""
    ours = [(fid, at) for fid, at in arrivals if fid in expected]
    lags = [at // 1_000_000 - expected[fid] for fid, at in first_arrivals(ours).items()]
    figures: dict[str, object] = {SLOTS: len(expected), RECEIVED: len(lags),
                                  MISSING: len(expected) - len(lags),
                                  DUPLICATES: duplicates(ours), **_lags(lags)}
    p99 = figures[P99]
    figures[TARGET] = VICTIM_P99_TARGET_MS
    figures[MET] = isinstance(p99, int) and p99 <= VICTIM_P99_TARGET_MS and not figures[MISSING]
    return figures


def _lags(lags_ms: list[int]) -> dict[str, object]:
    return {P50: percentile(lags_ms, 50) if lags_ms else None,
            P99: percentile(lags_ms, 99) if lags_ms else None,
            MAX: max(lags_ms) if lags_ms else None}


def prefixed(group: str, figures: dict[str, object]) -> dict[str, object]:
    """A group's figures as keys of its spike's figures: ``"<group>: <figure>"``."""
    return {f"{group}: {name}": value for name, value in figures.items()}


def of_group(spike: dict[str, Any], group: str) -> dict[str, Any] | None:
    """A group's figures back out of its spike's figures (``prefixed``); None if it has none."""
    head = f"{group}: "
    found = {key[len(head):]: value for key, value in spike.items() if key.startswith(head)}
    return found or None


def lines(spikes: dict[str, dict[str, Any]], about: list[str]) -> list[str]:
    """The printed isolation block: per spike (name -> its figures), one row per group it has,
    with the victim's target; ``about`` says what the groups were in this run."""
    out = ["", "== spike: isolation (issue 28): a tenant's spike and a slow host against "
               "everyone else ==", *(f"  {line}" for line in about),
           f"  {'':<31}{'':>7}{'':>8}{'':>5}{'run lag ms (arrival - nominal)':>30}  ledger",
           f"  {'':<31}{'slots':>7}{'missing':>8}{'dup':>5}{'p50':>10}{'p99':>10}{'max':>10}"
           f"  {'succeeded':>9}{'failed':>7}{'expired_stale':>14}"]
    for name, figures in spikes.items():
        groups = [(group, found) for group in GROUPS if (found := of_group(figures, group))]
        if not groups:
            continue
        out.append(f"  {name}")
        for group, found in groups:
            row = (f"    {group:<29}{_cell(found[SLOTS]):>7}{_cell(found[MISSING]):>8}"
                   f"{_cell(found[DUPLICATES]):>5}{_cell(found[P50]):>10}{_cell(found[P99]):>10}"
                   f"{_cell(found[MAX]):>10}")
            if LEDGER in found:
                ledger = found[LEDGER]
                row += (f"  {_cell(ledger.get('succeeded')):>9}{_cell(ledger.get('failed')):>7}"
                        f"{_cell(ledger.get('expired_stale')):>14}")
                others = {word: n for word, n in ledger.items() if word not in VERDICTS and n}
                if others:
                    row += f"  other: {others}"
                if found.get(NO_LEDGER):
                    row += f"  no ledger outcome: {found[NO_LEDGER]:,}"
            if TARGET in found:
                row += (f"  target p99 <= {found[TARGET]:,} ms, none missing: "
                        f"{'met' if found[MET] else 'NOT met'}")
            out.append(row)
    return out


def _cell(value: Any) -> str:
    return "-" if value is None else format(value, ",")
