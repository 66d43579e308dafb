"""Tenants and their API keys (``streams.adapters.tenants``)."""

import pytest

from streams.adapters import tenants


def test_tenant_keys_are_stored_hashed():
    record, key = tenants.new_tenant("acme")
    assert key.startswith("cs_") and len(key) > 40
    assert key not in str(record) and record["key_sha256"] == tenants.key_hash(key)
    with pytest.raises(ValueError):
        tenants.new_tenant("Bad Name!")
