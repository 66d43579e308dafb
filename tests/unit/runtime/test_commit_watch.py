"""Partitions whose records never reached their agent after a rebalance (streams.runtime.commit_watch)."""

from __future__ import annotations

from intervaltree import IntervalTree

from streams.runtime.commit_watch import CommitWatch, skipped

ACKED = {"cronstream.fired"}.__contains__  # what faust answers once the executor's agent exists


def test_a_record_at_the_committed_offset_is_skipped_only_if_nothing_accounts_for_it():
    # the failover benchmark's case: committed 864, first acknowledged 941
    assert skipped(864, 941, in_flight=False, in_gap=False)
    assert not skipped(864, 941, in_flight=True, in_gap=False)  # delivered, still running
    assert not skipped(864, 941, in_flight=False, in_gap=True)  # compacted away
    assert not skipped(864, None, in_flight=False, in_gap=False)  # nothing read yet: no evidence
    assert not skipped(864, 864, in_flight=False, in_gap=False)
    assert not skipped(None, 941, in_flight=False, in_gap=False)


class _Tp:
    def __init__(self, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition

    def __hash__(self) -> int:
        return hash((self.topic, self.partition))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Tp) and (self.topic, self.partition) == (other.topic,
                                                                           other.partition)


class _Message:
    def __init__(self, tp: _Tp, offset: int) -> None:
        self.tp, self.offset = tp, offset


class _Consumer:
    def __init__(self) -> None:
        self._unacked_messages: list[_Message] = []
        self._committed_offset: dict[_Tp, int] = {}
        self._acked: dict[_Tp, list[int]] = {}
        self._gap: dict[_Tp, IntervalTree] = {}


def test_a_partition_is_sought_back_only_when_stuck_at_the_same_offset_twice():
    fired, other = _Tp("cronstream.fired", 2), _Tp("cronstream.fired", 3)
    consumer = _Consumer()
    consumer._committed_offset = {fired: 864, other: 100}
    consumer._acked = {fired: [941, 942], other: [101]}
    consumer._unacked_messages = [_Message(other, 100)]  # partition 3: its record is running
    consumer._gap = {fired: IntervalTree.from_tuples([(865, 941)])}
    watch = CommitWatch()
    assert watch.check(consumer, [fired, other], ACKED) == []  # first sighting: could be a moment
    assert watch.check(consumer, [fired, other], ACKED) == [(fired, 864)]
    consumer._committed_offset[fired] = 2000  # it moved on: no longer the same suspicion
    consumer._acked[fired] = [2005]
    assert watch.check(consumer, [fired], ACKED) == []
    consumer._acked[fired] = [2000]  # acknowledged at last: nothing to heal
    assert watch.check(consumer, [fired], ACKED) == []


def test_partitions_of_topics_nobody_acknowledges_are_never_watched():
    changelog = _Tp("cronstream-fires-done-changelog", 0)
    consumer = _Consumer()
    consumer._committed_offset = {changelog: 0}
    consumer._acked = {changelog: [10]}
    watch = CommitWatch()
    watch.check(consumer, [changelog], ACKED)
    assert watch.check(consumer, [changelog], ACKED) == []
