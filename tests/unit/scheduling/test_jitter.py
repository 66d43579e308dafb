"""A slot's jitter (``streams.scheduling.schedule.jitter_ms``)."""


from streams.scheduling.schedule import fire_id, jitter_ms


def test_jitter_is_fixed_per_slot_and_bounded():
    ids = [fire_id("job", s * 1000) for s in range(200)]
    delays = [jitter_ms(f, 30) for f in ids]
    assert delays == [jitter_ms(f, 30) for f in ids]
    assert all(0 <= d <= 30_000 for d in delays) and len(set(delays)) > 100
    assert jitter_ms(ids[0], 0) == 0
