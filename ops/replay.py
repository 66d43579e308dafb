"""``cronstream replay``: copy a range of a topic back onto the same partitions, safely.

Only topics whose consumers are idempotent may be replayed; the reason is part of the
declaration below, and anything else is refused with it. A replayed record keeps its key, value,
headers and partition, so the consumer that sees it again meets the state it left:

- ``fired``: the executor finds the fire id in its ``fires-done`` table and does not run it again;
- ``fanout``: the walker finds every chunk ``done`` (skips it) or ``intent`` (resolves it unknown,
  never re-sends);
- ``ledger``: the sink upserts on ``record_id`` with the same values; the scheduler's observer only
  marks slots decided.

State topics (jobs, campaigns, tenants, suppressions) are refused: a replayed old definition
would overwrite a newer one. ``recipients`` and ``job-commands`` are refused too: a copy of a
recipient chunk lies outside every fan-out order's range, and a trigger is a new run by design.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from confluent_kafka import Consumer, KafkaError, TopicPartition

from streams.runtime.emit import Emitter
from streams.runtime.kafka_config import client_config
from streams.topology import FANOUT, FIRED, LEDGER, TOPICS, TopicSpec

SAFE: dict[str, str] = {
    FIRED.name: "the executor skips fire ids already in its fires-done table",
    FANOUT.name: "walkers skip done chunks and resolve chunks at intent as unknown",
    LEDGER.name: "the sink upserts on record_id; decisions are re-observed idempotently",
}


class ReplayError(ValueError):
    """A replay that is refused; the message names the option and the reason."""


def topic_named(name: str) -> TopicSpec:
    """``fired`` or ``cronstream.fired`` → its spec, if it may be replayed."""
    full = name if name.startswith("cronstream.") else f"cronstream.{name}"
    spec = next((t for t in TOPICS if t.name == full), None)
    if spec is None:
        raise ReplayError(f"--topic: unknown topic {name!r} (one of: "
                          f"{', '.join(t.name.removeprefix('cronstream.') for t in TOPICS)})")
    if spec.name not in SAFE:
        raise ReplayError(f"--topic: {spec.name} cannot be replayed safely (replayable: "
                          f"{', '.join(sorted(SAFE))})")
    return spec


@dataclass(frozen=True)
class Range:
    partition: int
    start: int  # first offset copied
    end: int  # one past the last

    @property
    def count(self) -> int:
        return max(0, self.end - self.start)


def clamp(partition: int, start: int | None, end: int | None, low: int, high: int) -> Range:
    """The requested [start, end) within what the partition still holds ([low, high))."""
    first = low if start is None else max(low, start)
    last = high if end is None else min(high, end)
    return Range(partition, first, max(first, last))


def epoch_ms(value: str, option: str) -> int:
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ReplayError(f"{option}: {value!r} is not an RFC 3339 time") from exc
    if moment.tzinfo is None:
        raise ReplayError(f"{option}: {value!r} needs a UTC offset (e.g. Z)")
    return int(moment.timestamp() * 1000)


def plan(consumer: Consumer, spec: TopicSpec, partitions: list[int] | None,
         from_offset: int | None, to_offset: int | None, from_time: str | None,
         to_time: str | None) -> list[Range]:
    """Offsets to copy per partition; times are turned into offsets by the broker's index."""
    if from_offset is not None and from_time is not None:
        raise ReplayError("--from-offset and --from-time: give one")
    if to_offset is not None and to_time is not None:
        raise ReplayError("--to-offset and --to-time: give one")
    if from_offset is None and from_time is None:
        raise ReplayError("--from-offset or --from-time: a start is required")
    known = sorted(consumer.list_topics(spec.name, timeout=10).topics[spec.name].partitions)
    parts = partitions if partitions is not None else known
    for p in parts:
        if p not in known:
            raise ReplayError(f"--partition: {spec.name} has no partition {p}")
    starts: dict[int, int | None] = {p: from_offset for p in parts}
    ends: dict[int, int | None] = {p: to_offset for p in parts}
    for option, value, target in (("--from-time", from_time, starts), ("--to-time", to_time, ends)):
        if value is not None:
            at = epoch_ms(value, option)
            found = consumer.offsets_for_times([TopicPartition(spec.name, p, at) for p in parts],
                                               timeout=10)
            failed = [tp for tp in found if tp.error is not None]
            if failed:
                raise ReplayError(f"{option}: the broker could not find offsets: {failed[0].error}")
            target.update({tp.partition: tp.offset if tp.offset >= 0 else None for tp in found})
            if option == "--from-time":  # no record at or after the time: nothing to copy there
                target.update({tp.partition: 1 << 62 for tp in found if tp.offset < 0})
    ranges = []
    for p in parts:
        low, high = consumer.get_watermark_offsets(TopicPartition(spec.name, p), timeout=10)
        ranges.append(clamp(p, starts[p], ends[p], low, high))
    return ranges


def copy(bootstrap: str, spec: TopicSpec, ranges: list[Range]) -> int:
    """Re-produce each range onto its own partition; returns the records copied."""
    consumer = Consumer({**client_config(bootstrap), "group.id": "cronstream-replay",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    emitter = Emitter(bootstrap, "cronstream-replay")
    copied = 0
    try:
        for r in (r for r in ranges if r.count):
            consumer.assign([TopicPartition(spec.name, r.partition, r.start)])
            position = r.start
            while position < r.end:
                msg = consumer.poll(5.0)
                if msg is None:
                    raise RuntimeError(f"{spec.name}[{r.partition}] stalled at offset {position}")
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        break  # compaction removed the rest of the range
                    raise RuntimeError(f"{spec.name}[{r.partition}] at {position}: {msg.error()}")
                position = msg.offset() + 1
                if msg.offset() >= r.end:
                    break
                emitter.produce(spec, msg.key().decode(), msg.value(), r.partition,
                                headers=dict(msg.headers() or []))
                copied += 1
        if emitter.flush(60):
            raise RuntimeError("replayed records not acknowledged by the broker")
    finally:
        consumer.close()
        emitter.close()
    return copied
