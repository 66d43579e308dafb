import gc
import logging

from prometheus_client import REGISTRY

from streams.runtime import metrics


def _collections(generation: str) -> float:
    value = REGISTRY.get_sample_value("cronstream_gc_pause_seconds_count",
                                      {"generation": generation})
    return value or 0.0


def test_every_collection_is_timed_and_a_long_one_is_logged(caplog, monkeypatch):
    callback = metrics.watch_gc()
    try:
        before = _collections("2")
        gc.collect()
        assert _collections("2") == before + 1
        monkeypatch.setattr(metrics, "GC_WARN_S", 0.0)
        with caplog.at_level(logging.WARNING, logger="streams.runtime.metrics"):
            gc.collect(1)
        assert "garbage collection of generation 1 took" in caplog.text
    finally:
        gc.callbacks.remove(callback)
