"""Quotas checked and reserved in one step (``api.quotas``): what is being written counts."""

from __future__ import annotations

import pytest
from fastapi import HTTPException

from api.quotas import Quotas


def test_writes_in_flight_count_against_the_quota_until_the_store_holds_them():
    quotas, stored = Quotas(), []
    with quotas.reserve("acme", "jobs", 1, 2, lambda: len(stored)):
        with quotas.reserve("acme", "jobs", 1, 2, lambda: len(stored)):
            with pytest.raises(HTTPException) as over, \
                    quotas.reserve("acme", "jobs", 1, 2, lambda: len(stored)):
                pass  # two in flight, none stored yet
            assert over.value.status_code == 403 and "quota of 2 jobs" in str(over.value.detail)
            with quotas.reserve("other", "jobs", 1, 2, lambda: 0):
                pass  # another tenant's count is its own
            stored.append("second")
        stored.append("first")
    with pytest.raises(HTTPException), quotas.reserve("acme", "jobs", 1, 2, lambda: len(stored)):
        pass
    with quotas.reserve("acme", "jobs", 0, 2, lambda: len(stored)):
        pass  # a write that adds nothing (a replacement) always passes


def test_a_failed_write_gives_its_reservation_back():
    quotas = Quotas()
    with pytest.raises(RuntimeError), quotas.reserve("acme", "jobs", 1, 1, lambda: 0):
        raise RuntimeError("the broker said no")
    with quotas.reserve("acme", "jobs", 1, 1, lambda: 0):
        pass


def test_writes_that_add_nothing_overlap_freely_and_leave_the_count_as_it_was():
    """Concurrent bulk deletes (each adds 0): the second to end once found the key the first
    had emptied gone, a KeyError and a 500 (bench.churn's delete phase)."""
    quotas = Quotas()
    first = quotas.reserve("acme", "jobs", 0, 1, lambda: 0)
    second = quotas.reserve("acme", "jobs", 0, 1, lambda: 0)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    second.__exit__(None, None, None)
    with quotas.reserve("acme", "jobs", 1, 1, lambda: 0):
        pass  # and the whole quota is free again
