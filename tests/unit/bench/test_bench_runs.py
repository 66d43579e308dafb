from bench import runs

DUE_MS = 1_800_000_000_000
MS = 1_000_000  # ns


def at(ms_after_due: float) -> int:
    return int((DUE_MS + ms_after_due) * MS)


def test_run_lag_is_the_first_arrival_minus_the_due_time():
    expected = {f"job-{i}": DUE_MS for i in range(4)}
    arrivals = [("job-0", at(100)), ("job-1", at(200)), ("job-2", at(300)), ("job-3", at(1_500)),
                ("job-1", at(5_000))]  # a duplicate: its lag is its first arrival's
    assert sorted(runs.run_lags_ms(arrivals, expected)) == [100, 200, 300, 1_500]
    figures = runs.run_figures(arrivals, expected)
    assert figures["run lag p50 ms"] == 300  # bench.common.percentile: index round(1.5) = 2
    assert figures["run lag p99 ms"] == 1_500
    assert figures["run lag max ms"] == 1_500
    assert figures["duplicates"] == 1
    assert figures["missing"] == 0
    assert figures["runs received"] == 4


def test_missing_ones_are_named_and_counted_and_other_runs_arrivals_are_set_apart():
    expected = {"a": DUE_MS, "b": DUE_MS, "c": DUE_MS}
    arrivals = [("b", at(10)), ("other-run", at(20)), ("other-run", at(30))]
    assert runs.missing(arrivals, expected) == ["a", "c"]
    figures = runs.run_figures(arrivals, expected)
    assert figures["missing"] == 2
    assert figures["unexpected arrivals"] == 2
    assert figures["duplicates"] == 0  # another run's repeats are not ours
    assert figures["runs received"] == 1


def test_rates_run_over_the_first_arrivals():
    expected = {f"j{i}": DUE_MS for i in range(5)}
    arrivals = [(f"j{i}", at(1_000 + 500 * i)) for i in range(5)] + [("j0", at(9_000))]
    figures = runs.run_figures(arrivals, expected)
    assert figures["runs/s (first to last arrival)"] == 2  # 5 runs from 1.0 s to 3.0 s: 2.5/s
    assert figures["runs/s (due to last arrival)"] == 2  # 5 over 3 s: 1.67/s


def test_each_run_is_measured_against_its_own_due_time():
    expected = {"early": DUE_MS, "late": DUE_MS + 60_000}
    arrivals = [("early", at(250)), ("late", at(60_750))]
    assert sorted(runs.run_lags_ms(arrivals, expected)) == [250, 750]


def test_nothing_arrived():
    figures = runs.run_figures([], {"a": DUE_MS})
    assert figures["missing"] == 1
    assert figures["runs/s (first to last arrival)"] == 0
    assert figures["run lag p99 ms"] is None


def test_all_at_once_does_not_divide_by_zero():
    expected = {"a": DUE_MS, "b": DUE_MS}
    figures = runs.run_figures([("a", at(5)), ("b", at(5))], expected)
    assert figures["runs/s (first to last arrival)"] == 2_000  # floor of 1 ms for the span
