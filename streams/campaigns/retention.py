"""What ``cronstream.recipients`` keeps: every chunk a campaign may still read, whatever its
``send_at``, and nothing once its campaign is done or cancelled.

Why: the topic was a delete-policy topic kept 7 days while a campaign's ``send_at`` has no upper
bound, so a list uploaded today for a send next week plus a day was gone when the send began
(issue 47; the walker then waited for ever at offsets that no longer existed). The topic is now
created with ``retention.ms=-1`` (``streams.topology.RECIPIENTS``) and pruned here instead: per
partition, Kafka's DeleteRecords up to the first offset anything may still read.

A campaign's range on a partition (``upload_ranges``) is kept while either holds:

- the campaign is not finished (``finished``): not cancelled or aborted at least ``grace_ms``
  ago, and ``send_at + send_deadline_s + grace_ms`` not passed. A ``ready`` campaign never
  scheduled is kept until it is cancelled: it may still be scheduled;
- a fan-out order of it on that partition is still unacknowledged (at or after the workers'
  committed offset of ``cronstream.fanout``): its walker reads the range, if only to record the
  rest ``cancelled`` or ``expired_stale``.

An upload in progress (``uploading``) holds everything written since it began (less a minute of
clock skew), for ``grace_ms`` at most: its range is named only when it is committed. And nothing
written after the partition's end as read before the campaigns were read is deleted: such a
chunk belongs to an upload the view may not show yet.

Where the topic on a cluster still has a finite retention (made before this change, or by an
operator's policy), ``refusal`` is the API's answer to a campaign it could not keep.

``keep_from``, ``finished`` and ``refusal`` are pure; ``prune`` asks the cluster.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from streams.records import Campaign
from streams.runtime import admin
from streams.runtime.clock import now_ms
from streams.runtime.codec import codec
from streams.runtime.kafka_config import client_config
from streams.runtime.record_stores import MemoryStore
from streams.runtime.topic_view import TopicView
from streams.topology import APP_ID, CAMPAIGNS, DAY_MS, FANOUT, RECIPIENTS

log = logging.getLogger(__name__)

# how long after its deadline (or its cancellation) a campaign's recipients are kept: the
# reconciler re-drives a campaign's slot for minutes after it, and an operator may look into a
# send the day after
GRACE_MS = DAY_MS
CLOCK_SKEW_MS = 60_000  # between the API that stamps an upload and the broker that stamps chunks


def deadline_ms(campaign: Mapping[str, Any]) -> int:
    """Nothing of the campaign leaves after this (``streams.campaigns.chunk_verdict``)."""
    return int(campaign["send_at_ms"]) + int(campaign["send_deadline_s"]) * 1000


def finished(campaign: Mapping[str, Any], now: int, grace_ms: int = GRACE_MS) -> bool:
    """Whether no walker will read the campaign's recipients any more, unless an order of it is
    still pending: cancelled or aborted ``grace_ms`` ago, or past its deadline by as much."""
    if campaign["status"] in ("cancelled", "aborted"):
        return now >= int(campaign["updated_ms"]) + grace_ms
    return now >= deadline_ms(campaign) + grace_ms


def upload_began_ms(campaigns: Iterable[Mapping[str, Any]], now: int,
                    grace_ms: int = GRACE_MS) -> int | None:
    """The earliest start of an upload still in progress (begun less than ``grace_ms`` ago),
    less the clock skew; None when none is."""
    begun = [int(c["updated_ms"]) for c in campaigns
             if c["status"] == "uploading" and now < int(c["updated_ms"]) + grace_ms]
    return min(begun) - CLOCK_SKEW_MS if begun else None


def keep_from(campaigns: Iterable[Mapping[str, Any]], pending: set[tuple[str, int]],
              ends: Mapping[int, int], upload_floor: Mapping[int, int], now: int,
              grace_ms: int = GRACE_MS) -> dict[int, int]:
    """Per partition of the recipients topic, the first offset to keep: the start of the
    lowest range still needed (unfinished, or with a pending order: ``pending`` holds
    (campaign id, partition)), the upload floor, else the partition's ``end``."""
    keep = dict(ends)
    for campaign in campaigns:
        done = finished(campaign, now, grace_ms)
        for span in campaign.get("upload_ranges") or []:
            part = span["partition"]
            if part in keep and (not done or (campaign["campaign_id"], part) in pending):
                keep[part] = min(keep[part], int(span["start"]))
    for part, floor in upload_floor.items():
        if part in keep:
            keep[part] = min(keep[part], floor)
    return keep


def refusal(send_at_ms: int, send_deadline_s: int, uploaded_from_ms: int,
            retention_ms: int) -> str | None:
    """Why a campaign cannot be kept, or None: with a finite ``retention.ms`` a chunk written at
    ``uploaded_from_ms`` (or later) is kept until that plus the retention at least, and the
    campaign's walkers read it until its deadline (and a grace after)."""
    if retention_ms < 0:
        return None
    kept_until = uploaded_from_ms + retention_ms
    needed_until = send_at_ms + send_deadline_s * 1000 + GRACE_MS
    if needed_until <= kept_until:
        return None
    return (f"send_at + send_deadline_s + a day ({_iso(needed_until)}) is after "
            f"{_iso(kept_until)}, when {RECIPIENTS.name} may delete the recipients: the topic "
            f"keeps records {retention_ms // 1000} s (retention.ms={retention_ms}) on this "
            f"cluster; send sooner, or set its retention.ms to -1 (docs/deploy.md, Upgrading)")


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace(
        "+00:00", "Z")


def retention_ms(bootstrap: str) -> int:
    """The recipients topic's ``retention.ms`` as the cluster applies it."""
    return int(admin.topic_config(bootstrap, RECIPIENTS.name, "retention.ms"))


# -- asking the cluster ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Pruned:
    partition: int
    log_start: int  # before
    keep_from: int  # the log's start after (unchanged when nothing could go)


def pending_orders(bootstrap: str, partitions: int,
                   timeout_s: float = 30.0) -> set[tuple[str, int]]:
    """(campaign id, partition) of every fan-out order the workers have not acknowledged: from
    the group's committed offset of each ``cronstream.fanout`` partition (its log start when it
    has none) to the partition's end; ``partitions``: the cluster's (``Settings.partitions``)."""
    parts = [(FANOUT.name, p) for p in range(FANOUT.count(partitions))]
    ends = admin.end_offsets(bootstrap, parts, timeout_s)
    starts = admin.start_offsets(bootstrap, parts, timeout_s)
    committed = admin.committed_offsets(bootstrap, APP_ID, timeout_s)
    begin = {tp: max(committed.get(tp, starts[tp]), starts[tp]) for tp in parts}
    todo = {tp: end for tp, end in ends.items() if begin[tp] < end}
    found: set[tuple[str, int]] = set()
    if not todo:
        return found
    consumer = Consumer({**client_config(bootstrap), "group.id": f"cronstream-prune-{uuid.uuid4()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(t, p, begin[(t, p)]) for t, p in todo])
        left = dict(todo)
        while left:
            batch = consumer.consume(500, timeout_s)
            if not batch:
                raise TimeoutError(f"{FANOUT.name}: no record within {timeout_s}s below its end")
            for msg in batch:
                if msg.error():
                    continue
                tp = (msg.topic(), msg.partition())
                if msg.value() is not None:
                    order = codec().decode(msg.value())
                    found.add((order["campaign_id"], order["partition"]))
                if tp in left and msg.offset() + 1 >= left[tp]:
                    del left[tp]
    finally:
        consumer.close()
    return found


def _offsets_at(bootstrap: str, partitions: int, at_ms: int, timeout_s: float) -> dict[int, int]:
    """Per recipients partition, the first offset written at ``at_ms`` or later (-1: none)."""
    request = {TopicPartition(RECIPIENTS.name, p): OffsetSpec.for_timestamp(at_ms)
               for p in range(RECIPIENTS.count(partitions))}

    def ask(client: AdminClient) -> dict[int, int]:
        futures = client.list_offsets(request, request_timeout=timeout_s)
        return {tp.partition: f.result().offset for tp, f in futures.items()}

    return admin.call(bootstrap, ask)


def prune(bootstrap: str, partitions: int, campaigns: Callable[[], list[Campaign]],
          now: int | None = None,
          grace_ms: int = GRACE_MS, dry_run: bool = False,
          timeout_s: float = 30.0) -> list[Pruned]:
    """Delete what no campaign can read any more from every recipients partition; return what
    each partition held and holds. ``campaigns`` returns every campaign record, read up to the
    topic's end when it is called (after the partitions' ends are read)."""
    now = now_ms() if now is None else now
    parts = [(RECIPIENTS.name, p) for p in range(RECIPIENTS.count(partitions))]
    ends = {p: at for (_, p), at in admin.end_offsets(bootstrap, parts, timeout_s).items()}
    starts = {p: at for (_, p), at in admin.start_offsets(bootstrap, parts, timeout_s).items()}
    records = campaigns()  # after the ends: a chunk below them has its campaign in the records
    pending = pending_orders(bootstrap, partitions, timeout_s)
    began = upload_began_ms(records, now, grace_ms)
    floor: dict[int, int] = {}
    if began is not None:
        floor = {p: (at if at >= 0 else ends[p])
                 for p, at in _offsets_at(bootstrap, partitions, began, timeout_s).items()}
    keep = keep_from(records, pending, ends, floor, now, grace_ms)
    result = [Pruned(p, starts[p], max(starts[p], keep[p])) for p in sorted(keep)]
    deletions = [TopicPartition(RECIPIENTS.name, r.partition, r.keep_from) for r in result
                 if r.keep_from > r.log_start]
    if deletions and not dry_run:

        def delete(client: AdminClient) -> None:
            for tp, future in client.delete_records(deletions, request_timeout=timeout_s).items():
                future.result()
                log.info("%s partition %d: records before offset %d deleted (no campaign can "
                         "read them)", tp.topic, tp.partition, tp.offset)

        admin.call(bootstrap, delete)
    return result


def campaign_records(bootstrap: str) -> Callable[[], list[Campaign]]:
    """Every campaign record, from a view of the campaigns topic of this process's own, caught up
    at each call (``prune``'s ``campaigns``)."""
    store = MemoryStore()
    view = TopicView(bootstrap, CAMPAIGNS, store)
    started = threading.Lock()
    running = False

    def read() -> list[Campaign]:
        nonlocal running
        with started:
            if not running:
                view.start()  # returns once it has read the topic to its end
                running = True
            elif not view.wait_caught_up(60):
                raise TimeoutError(f"the {CAMPAIGNS.name} view could not catch up")
        return store.values()

    return read


def prune_report(bootstrap: str, partitions: int, now: int | None = None, dry_run: bool = False
                 ) -> list[list[int]]:
    """``prune`` with a view of its own, as [partition, log start before, after] lists (JSON:
    ``cronstream recipients prune`` and a test's child process, ``stack.isolated``)."""
    return [[p.partition, p.log_start, p.keep_from]
            for p in prune(bootstrap, partitions, campaign_records(bootstrap), now,
                           dry_run=dry_run)]


def orders_pending(bootstrap: str, partitions: int) -> int:
    """How many (campaign, partition) fan-out orders the workers have not acknowledged."""
    return len(pending_orders(bootstrap, partitions))


class Pruner:
    """``prune`` every ``interval_s`` on a daemon thread (the API runs one): a failed round is
    logged and tried again at the next."""

    def __init__(self, bootstrap: str, partitions: int, interval_s: float) -> None:
        self.bootstrap, self.interval_s = bootstrap, interval_s
        self.partitions = partitions  # the cluster's (Settings.partitions)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recipients-pruner", daemon=True)

    def start(self) -> Pruner:
        if self.interval_s > 0:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        records = campaign_records(self.bootstrap)
        while not self._stop.wait(self.interval_s):
            try:
                prune(self.bootstrap, self.partitions, records)
            except Exception:  # noqa: BLE001 - the next round tries again
                log.exception("pruning %s failed; tried again in %.0f s", RECIPIENTS.name,
                              self.interval_s)
