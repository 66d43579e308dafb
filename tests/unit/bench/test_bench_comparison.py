import math

from bench import comparison
from bench.runs import run_figures
from bench.spike import Received, webhook_figures

MINUTE = 1_800_000_060_000
MS = 1_000_000  # ns


def spread(runs: int, first_ms: int, last_ms: int) -> list[int]:
    """Run lags of ``runs`` runs evenly from ``first_ms`` to ``last_ms``."""
    return [first_ms + (last_ms - first_ms) * i // (runs - 1) for i in range(runs)]


def cronstream_spike(lags_ms: list[int]) -> dict[str, object]:
    """A webhook spike's figures as bench.spike computes them, every slot received once."""
    got = Received(slots=len(lags_ms), lags_ms=lags_ms, first_ns=(MINUTE + min(lags_ms)) * MS,
                   last_ns=(MINUTE + max(lags_ms)) * MS)
    return webhook_figures(got, [], {}, len(lags_ms), MINUTE, [], 0, {})


def peer_spike(lags_ms: list[int]) -> dict[str, object]:
    """The peer's figures as bench.peer computes them (bench.runs), every task received once."""
    expected = {f"p-{i:07d}": MINUTE for i in range(len(lags_ms))}
    arrivals = [(f"p-{i:07d}", (MINUTE + lag) * MS) for i, lag in enumerate(lags_ms)]
    return run_figures(arrivals, expected)


def test_each_cronstream_spike_is_compared_with_the_peers_from_the_same_figures():
    first = cronstream_spike(spread(3_000, 1_000, 4_000))  # 1,000/s first to last, 750/s from due
    second = cronstream_spike(spread(3_000, 500, 2_000))  # 2,000/s, 1,500/s
    theirs = peer_spike(spread(2_000, 2_000, 6_000))  # 500/s, 333/s

    compared = comparison.compare({"first spike": first, "spike 2 (a minute later)": second},
                                  theirs)

    assert compared[comparison.PEER] == {
        "runs/s (first to last arrival)": 500, "runs/s (due to last arrival)": 333,
        "run lag p50 ms": theirs["run lag p50 ms"], "run lag p99 ms": theirs["run lag p99 ms"],
        "run lag max ms": 6_000.0, "received": 2_000, "missing": 0, "duplicates": 0}
    assert compared["cronstream first spike"] == {
        "runs/s (first to last arrival)": 1_000, "runs/s (due to last arrival)": 750,
        "run lag p50 ms": first["run lag p50 ms (arrival - nominal)"],
        "run lag p99 ms": first["run lag p99 ms"], "run lag max ms": 4_000,
        "received": 3_000, "missing": 0, "duplicates": 0}
    assert compared[comparison.RATIO] == {
        "first spike": {"runs/s (first to last arrival)": 2.0,
                        "runs/s (due to last arrival)": 2.25},
        "spike 2 (a minute later)": {"runs/s (first to last arrival)": 4.0,
                                     "runs/s (due to last arrival)": 4.5}}


def test_the_ratio_is_ours_over_theirs_and_absent_when_it_cannot_be_computed():
    assert comparison.ratio(3_000, 2_000) == 1.5
    assert comparison.ratio(1, 3) == 0.33
    assert comparison.ratio(3_000, 0) is None  # the peer ran nothing
    assert comparison.ratio(None, 2_000) is None
    assert comparison.ratio(math.nan, 2_000) is None  # a percentile of no arrival


def test_a_spike_nothing_arrived_from_is_compared_without_a_ratio():
    got = Received(slots=2)
    nothing = webhook_figures(got, [], {}, 0, MINUTE, [], 0, {})
    compared = comparison.compare({"first spike": nothing}, peer_spike(spread(10, 100, 1_000)))
    assert compared["cronstream first spike"]["missing"] == 2
    assert compared["cronstream first spike"]["run lag p99 ms"] is None  # NaN: no arrival
    assert compared[comparison.RATIO]["first spike"]["runs/s (first to last arrival)"] == 0.0
    assert compared[comparison.RATIO]["first spike"]["runs/s (due to last arrival)"] is None


def test_the_printed_block_names_the_spike_of_every_ratio():
    compared = comparison.compare(
        {"first spike": cronstream_spike(spread(3_000, 1_000, 4_000)),
         "spike 2 (a minute later)": cronstream_spike(spread(3_000, 500, 2_000))},
        peer_spike(spread(2_000, 2_000, 6_000)))

    printed = comparison.lines(compared, "db-scheduler 16.12.0, 2 instances x 40 threads")

    assert "  peer: db-scheduler 16.12.0, 2 instances x 40 threads" in printed
    rows = {line.split("  ")[1]: line.split() for line in printed
            if line.startswith(("  cronstream ", f"  {comparison.PEER}"))}
    assert rows["cronstream first spike"][-7:-5] == ["1,000", "750"]
    assert rows[comparison.PEER][-7:-5] == ["500", "333"]
    assert rows[comparison.PEER][-3:] == ["6,000", "0", "0"]  # max lag, missing, duplicates
    ratios = [line for line in printed if line.startswith("  ratio runs/s cronstream/peer = ")]
    assert ratios[0].startswith("  ratio runs/s cronstream/peer = 2.00  (cronstream's first spike "
                                "against the peer's spike")
    assert ratios[0].endswith("; 2.25 from the due time to the last arrival)")
    assert ratios[1].startswith("  ratio runs/s cronstream/peer = 4.00  (cronstream's spike 2 (a "
                                "minute later) against the peer's spike")
