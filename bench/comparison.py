"""cronstream's webhook spikes against the peer's (db-scheduler's), from one ``bench.spike`` run.

Pure functions over the two systems' figures as ``bench.spike.webhook_figures`` and
``bench.peer.run_peer`` return them: the few figures both have, under the same names, and the
runs/s ratio cronstream/peer of each measured cronstream spike against the peer's one spike. The
ratio is computed here, from the run that printed it, and never from figures of another run:
the box is shared, and only a comparison made on it in one sitting is fair to both.
"""

from __future__ import annotations

import math
from typing import Any

PEER = "db-scheduler (peer)"
FIRST_TO_LAST = "runs/s (first to last arrival)"
DUE_TO_LAST = "runs/s (due to last arrival)"
# the compared figures, and what each system calls them
COMPARED: dict[str, tuple[str, str]] = {  # name here: (cronstream's, the peer's)
    FIRST_TO_LAST: (FIRST_TO_LAST, FIRST_TO_LAST),
    DUE_TO_LAST: (DUE_TO_LAST, DUE_TO_LAST),
    "run lag p50 ms": ("run lag p50 ms (arrival - nominal)", "run lag p50 ms"),
    "run lag p99 ms": ("run lag p99 ms", "run lag p99 ms"),
    "run lag max ms": ("run lag max ms", "run lag max ms"),
    "received": ("received (distinct slots)", "runs received"),
    "missing": ("missing (never received)", "missing"),
    "duplicates": ("duplicates received", "duplicates"),
}
RATIO = "ratio runs/s cronstream/peer"


def side(figures: dict[str, Any], which: int) -> dict[str, Any]:
    """The compared figures of one system's spike (``which``: 0 cronstream's, 1 the peer's);
    None for a figure it did not report."""
    return {name: _number(figures.get(keys[which])) for name, keys in COMPARED.items()}


def ratio(ours: Any, theirs: Any) -> float | None:
    """ours / theirs to two decimals; None when either is missing or the peer's is 0."""
    ours, theirs = _number(ours), _number(theirs)
    if ours is None or theirs is None or theirs == 0:
        return None
    return round(ours / theirs, 2)


def compare(spikes: dict[str, dict[str, Any]], peer: dict[str, Any]) -> dict[str, Any]:
    """Each cronstream spike (name -> its webhook figures) and the peer's spike side by side, and
    the runs/s ratio cronstream/peer of each cronstream spike, runs/s counted from the first
    arrival to the last (the drain's own rate) and from the due time to the last arrival (what a
    user waits for the whole spike)."""
    theirs = side(peer, 1)
    compared: dict[str, Any] = {f"cronstream {name}": side(figures, 0)
                                for name, figures in spikes.items()}
    compared[PEER] = theirs
    compared[RATIO] = {
        name: {rate: ratio(compared[f"cronstream {name}"][rate], theirs[rate])
               for rate in (FIRST_TO_LAST, DUE_TO_LAST)}
        for name in spikes}
    return compared


def lines(compared: dict[str, Any], peer_run: str) -> list[str]:
    """The printed comparison block: one row per spike, then one ratio line per cronstream
    spike, naming the spike it is of (``peer_run`` says how the peer ran: instances, threads,
    warm-up)."""
    header = (f"  {'':<38}{'runs/s':>9}{'runs/s':>9}{'run lag ms':>18}",
              f"  {'':<38}{'1st-last':>9}{'due-last':>9}{'p50':>9}{'p99':>9}{'max':>9}"
              f"{'missing':>9}{'dup':>6}")
    out = ["", "== spike: cronstream against the peer (same box, a receiver of the same kind "
               "each, one after the other) ==", f"  peer: {peer_run}", *header]
    for name, figures in compared.items():
        if name == RATIO:
            continue
        out.append(f"  {name:<38}{_cell(figures[FIRST_TO_LAST]):>9}{_cell(figures[DUE_TO_LAST]):>9}"
                   f"{_cell(figures['run lag p50 ms']):>9}{_cell(figures['run lag p99 ms']):>9}"
                   f"{_cell(figures['run lag max ms']):>9}{_cell(figures['missing']):>9}"
                   f"{_cell(figures['duplicates']):>6}")
    for name, rates in compared[RATIO].items():
        out.append(f"  {RATIO} = {_cell(rates[FIRST_TO_LAST], '.2f')}  (cronstream's {name} against "
                   f"the peer's spike, runs/s from first to last arrival; "
                   f"{_cell(rates[DUE_TO_LAST], '.2f')} from the due time to the last arrival)")
    return out


def _number(value: Any) -> float | int | None:
    """A figure as a number; None for a missing one or NaN (a percentile of nothing)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if isinstance(value, float) and math.isnan(value) else value


def _cell(value: Any, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)
