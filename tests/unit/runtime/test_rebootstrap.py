"""``streams.runtime.rebootstrap`` against aiokafka's own source (the behaviour, on a real
broker: ``tests/integration/test_rebootstrap.py``)."""

from __future__ import annotations

import inspect

from aiokafka.client import AIOKafkaClient


def test_the_rebootstrap_reads_the_client_attributes_aiokafkas_own_bootstrap_passes() -> None:
    """``streams.runtime.rebootstrap`` opens its connection as ``AIOKafkaClient.bootstrap``
    does; an aiokafka that renames one of those attributes fails here."""
    from streams.runtime import library_patch
    from streams.runtime.rebootstrap import CONN_SETTINGS

    source = inspect.getsource(AIOKafkaClient.bootstrap)
    for name, attr in CONN_SETTINGS.items():
        assert f"{name}=self.{attr}" in source, (name, attr)
    assert "if not len(self.cluster.brokers()):" in source  # its bootstrap connection is kept
    update = library_patch.original(AIOKafkaClient, "_metadata_update")  # even once wrapped
    assert '"bootstrap"' in inspect.getsource(update)
