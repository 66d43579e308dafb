"""Zombie fencing of fired records (``streams.runtime.fencing``)."""


from streams.runtime.fencing import EpochFence


def test_fence_rejects_an_older_epoch_after_a_newer_one():
    fence = EpochFence()
    assert fence.admit(0, 3) and fence.admit(0, 3)
    assert fence.admit(0, 4)
    assert not fence.admit(0, 3)
    assert fence.admit(1, 1), "partitions are fenced independently"
    assert fence.rejected == 1


def test_fence_forgets_a_revoked_partition_whose_log_is_read_again():
    """After a rebalance the partition is read again from the committed offset: the old owner's
    never-executed records (epoch 3) come before the new owner's (epoch 4) and must run; a
    zombie's epoch-3 record after them is still fenced."""
    fence = EpochFence()
    assert fence.admit(0, 3) and fence.admit(0, 4)  # read up to the new owner's records
    fence.forget(0)  # revoked; the next assignment seeks back to the committed offset
    assert fence.admit(0, 3), "the old owner's backlog is legitimate"
    assert fence.admit(0, 4)
    assert not fence.admit(0, 3), "a late epoch-3 record after epoch 4 is a zombie's"


def test_a_promoted_regions_records_are_newer_than_the_deposed_regions_copies():
    """The promoted region's scheduler group starts its generations afresh, while its fired topic
    holds the deposed region's records copied with their higher generations: the region's epoch
    above the generation keeps the promoted region's slots from being fenced as a zombie's."""
    from streams.runtime.region import GENERATIONS, fence_epoch

    fence = EpochFence()
    assert fence.admit(0, fence_epoch(1, 7)), "the deposed region's copy, generation 7"
    assert fence.admit(0, fence_epoch(2, 1)), "the promoted region's first generation"
    assert not fence.admit(0, fence_epoch(1, 9)), "a late record of the deposed region: fenced"
    assert fence_epoch(0, 5) == 5, "one region: the generation itself"
    assert fence_epoch(1, GENERATIONS + 3) < fence_epoch(2, 0), "generations never reach the next epoch"


def test_a_scheduler_writes_its_regions_epoch_above_its_generation():
    from streams.runtime.region import fence_epoch
    from streams.scheduling.deciding import ScheduleState

    state = ScheduleState({}, None, bootstrap="127.0.0.1:1", worker_id="w")
    state.generation = 4
    state.under_region(0)
    assert state.epoch == 4
    state.under_region(3)
    assert state.epoch == fence_epoch(3, 4)
