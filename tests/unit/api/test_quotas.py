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
