"""``cronstream region promote`` and ``region status``: the promotion's steps in order
(docs/regions.md, "Promotion"), on the authority and on what the deployment does besides it.

The authority's changes are ``streams.runtime.authority.Store``'s compare-and-sets; everything
else a promotion does — stop MirrorMaker, tell whether the standby's copy has caught up, start
the promoted region's sinks, workers and API — is the deployment's, given as a ``Site`` (the
local two-region stack's is ``cli``'s; a real deployment's operator does those by hand and the
site only says so). Waits read the authority's clock, never this machine's wall clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from streams.runtime.authority import Store
from streams.runtime.region import Authority, Promotion, Refused

POLL_S = 0.25  # how often a step's condition is asked again


class PromotionFailed(Exception):
    """A step that could not be done: the message says which and what to do."""


@dataclass
class Site:
    """What a promotion does besides the authority."""

    # stop copying the old region into the new one: nothing of the old region lands after it
    stop_replication: Callable[[], object] = lambda: None
    # records of the active region not copied yet; None: cannot tell (then a planned
    # promotion waits no further: the operator was told)
    replication_lag: Callable[[], int | None] = lambda: None
    # an unplanned promotion's: the schedulers' marks in the promoted region's copy moved back
    # before the last fired record that crossed (``streams.scheduling.progress.rewind_marks``)
    rewind_marks: Callable[[str], object] = lambda name: None
    # the promoted region's sinks, workers and API, started (returns once they are ready)
    start_region: Callable[[str], object] = lambda name: None


@dataclass
class Figures:
    """What a promotion measured, in seconds from its start (monotonic)."""

    lease_ended_s: float | None = None
    caught_up_s: float | None = None
    promoted_s: float | None = None
    started_s: float | None = None
    notes: list[str] = field(default_factory=list)


def promote(store: Store, to: str, *, planned: bool, site: Site,
            say: Callable[[str], None] = print, wait_s: float = 120.0,
            sleep: Callable[[float], None] = time.sleep,
            monotonic: Callable[[], float] = time.monotonic) -> tuple[Promotion, Figures]:
    """Make region ``to`` active: the steps of docs/regions.md's table, each said as it is
    done. Planned: drain, wait for the lease to end and the copy to catch up, stop replication,
    promote. Unplanned: stop replication, wait for the old lease to end (refused while the old
    region still renews), promote (its reservations and lease inherited), rewind the marks.
    Then start ``to``."""
    began = monotonic()
    figures = Figures()
    row = _row(store)
    if row.active == to:
        raise PromotionFailed(f"region {to} is already active under epoch {row.epoch}")
    deposed = row.active
    if planned:
        if not row.draining:
            row = store.begin_handover(row.epoch)
        say(f"region {deposed} drains (epoch {row.epoch}): its renewals are refused from now on")
    else:
        site.stop_replication()
        say(f"replication from region {deposed} stopped: nothing of it lands in region {to}'s "
            "copy from now on")
    row = _lease_ended(store, row, wait_s, sleep, monotonic, began)
    figures.lease_ended_s = monotonic() - began
    say(f"region {deposed}'s lease ended (it was held until {row.lease_until_ms}, the "
        "authority's clock)")
    if planned:
        while (lag := site.replication_lag()) is not None and lag > 0:
            if monotonic() - began > wait_s:
                raise PromotionFailed(f"region {to}'s copy still lacks {lag} records after "
                                      f"{wait_s:.0f} s; region {deposed} drains and sends "
                                      "nothing: look at MirrorMaker, then promote again")
            sleep(POLL_S)
        if lag is None:
            figures.notes.append("replication lag unknown: not waited for")
        figures.caught_up_s = monotonic() - began
        say(f"region {to}'s copy has caught up")
        site.stop_replication()
    try:
        done = store.promote(to, row.epoch, planned=planned)
    except Refused as refused:
        raise PromotionFailed(f"promotion refused: {refused.reason}") from refused
    figures.promoted_s = monotonic() - began
    say(f"region {to} active under epoch {done.row.epoch} ("
        f"{'planned' if planned else 'unplanned: the deposed reservations are inherited'})")
    if not planned:
        moved = site.rewind_marks(to)
        say(f"the schedulers' marks in region {to}'s copy rewound: {moved}")
    site.start_region(to)
    figures.started_s = monotonic() - began
    say(f"region {to}'s apps started, {figures.started_s:.1f} s after the promotion began")
    return done, figures


def _row(store: Store) -> Authority:
    row = store.read()
    if row is None:
        raise PromotionFailed("the authority has no row: no region was ever made active "
                              "(`./dev stack up --regions 2` makes region a active)")
    return row


def _lease_ended(store: Store, row: Authority, wait_s: float, sleep: Callable[[float], None],
                 monotonic: Callable[[], float], began: float) -> Authority:
    """The row once the active region's lease has ended on the authority's clock; an active
    region still renewing past ``wait_s`` fails the promotion (it is healthy, as far as the
    authority can tell: stop it or cut it off first)."""
    while True:
        now = store.now_ms()
        row = _row(store)
        if now > row.lease_until_ms:
            return row
        if monotonic() - began > wait_s:
            raise PromotionFailed(
                f"region {row.active} still renews its lease (held until {row.lease_until_ms}, "
                f"now {now} on the authority's clock) after {wait_s:.0f} s: it is alive and "
                "sending; stop it or cut it off from the authority first, or promote planned")
        sleep(POLL_S)


def status(store: Store) -> dict[str, object]:
    """The authority's row, its lease as the authority's clock sees it, the epochs' history and
    the reservations a promoted region inherited."""
    row = _row(store)
    now = store.now_ms()
    inherited = [(c, p, i) for c, p, _, i in store.reservations() if i is not None]
    return {"epoch": row.epoch, "active": row.active, "draining": row.draining,
            "lease_left_ms": row.lease_until_ms - now, "horizon_ms": row.horizon_ms,
            "epochs": [{"epoch": e, "region": r, "began_ms": b, "kind": k, "deposed": d,
                        "horizon_ms": h} for e, r, b, k, d, h in store.epochs()],
            "inherited": [{"campaign_id": c, "partition": p, "inherited_hwm": i}
                          for c, p, i in inherited]}


def status_text(found: dict[str, object]) -> str:
    left = int(str(found["lease_left_ms"]))
    lease = f"held for another {left / 1000:.1f} s" if left > 0 else \
        f"ended {-left / 1000:.1f} s ago"
    lines = [f"active region {found['active']} under epoch {found['epoch']}; lease {lease}"
             f"{'; draining' if found['draining'] else ''}"]
    if found["horizon_ms"]:
        lines.append(f"reminders asked before {found['horizon_ms']} (the authority's clock) and "
                     "not replicated as done are unknown")
    epochs = found["epochs"]
    assert isinstance(epochs, list)
    for e in epochs:
        lines.append(f"  epoch {e['epoch']}: region {e['region']} ({e['kind']}"
                     f"{', deposed ' + e['deposed'] if e['deposed'] else ''})")
    inherited = found["inherited"]
    assert isinstance(inherited, list)
    if inherited:
        lines.append(f"inherited reservations: {len(inherited)} (campaign, partition) rows")
    return "\n".join(lines)
