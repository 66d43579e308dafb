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
