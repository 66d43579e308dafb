import argparse

import pytest

from bench import batching
from streams.runtime.codec import codec
from streams.scheduling.schedule import fire_id


def test_the_benchmark_sends_the_fired_records_the_scheduler_writes():
    sent = batching.records(3)
    assert len({key for key, _ in sent}) == 3
    for key, value in sent:
        fired = codec().decode(value)
        assert fired["job_id"] == key
        assert fired["fire_id"] == fire_id(key, fired["nominal_ms"])
        assert fired["decision"] == "fired"
        assert fired["target"]["topic"] == "bench.fires"


def test_lingers_are_distinct_whole_milliseconds():
    assert batching.lingers("5,50") == [5, 50]
    for bad in ("5,x", "5,-1", "5,5", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            batching.lingers(bad)
