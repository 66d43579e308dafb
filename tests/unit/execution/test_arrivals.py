"""What a fired record that arrives again means (``streams.execution.arrivals``)."""




def test_a_running_slots_own_record_delivered_again_is_never_acknowledged():
    """Acknowledging it would commit the offset while the slot still runs: a crash before its
    outcome reached the ledger would lose the slot. Another record of the same fire is redundant."""
    from streams.execution.arrivals import Arrival, classify
    from streams.topology import INTENT

    assert classify(None, (3, 41), (3, 41)) is Arrival.REDELIVERED
    assert classify(INTENT, (3, 41), (3, 41)) is Arrival.REDELIVERED, "its own send, not a crash's"
    assert classify(None, (3, 41), (3, 57)) is Arrival.RUNNING_COPY
    assert classify(None, (3, 41), (5, 41)) is Arrival.RUNNING_COPY
    assert classify(INTENT, None, (3, 41)) is Arrival.UNKNOWN_SEND
    assert classify(b"succeeded", None, (3, 41)) is Arrival.DONE
    assert classify(None, None, (3, 41)) is Arrival.NEW


def test_a_send_refused_before_a_crash_is_run_again_not_unknown():
    from streams.execution.arrivals import Arrival, classify
    from streams.topology import REFUSED

    assert classify(REFUSED, None, (3, 41)) is Arrival.NEW
    assert classify(REFUSED, (3, 41), (3, 41)) is Arrival.REDELIVERED
