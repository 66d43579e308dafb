"""The console benchmark's figures of a campaign send, over the whole send and per quarter of it."""

from __future__ import annotations

import math

from bench import console


def test_figures_are_given_over_the_whole_send_and_per_quarter_of_progress():
    samples = [(0, 10.0, 11.0), (10, 12.0, 13.0), (30, 20.0, 21.0), (99, 40.0, 41.0),
               (100, 50.0, 52.0)]
    figures = console.by_progress(samples)
    assert list(figures) == ["whole send", "0-24 %", "25-49 %", "75-100 %"]  # no sample in 50-74
    assert figures["whole send"]["samples"] == 5
    assert figures["whole send"]["complete max ms"] == 52.0
    assert figures["0-24 %"]["samples"] == 2
    assert figures["0-24 %"]["ttfb p95 ms"] == 12.0
    assert figures["25-49 %"]["complete p50 ms"] == 21.0
    assert figures["75-100 %"]["samples"] == 2, "99 % and 100 % are both in the last quarter"


def test_stats_of_no_samples_are_not_numbers_rather_than_an_error():
    figures = console.stats([], [])
    assert all(math.isnan(value) for value in figures.values())
