"""What a webhook receiver saw of a spike's runs: run lag, rate, duplicates and missing ones.

Pure functions over the receiver's arrivals (fire id, arrival time in ns since the epoch) and the
runs expected (fire id -> due time in ms since the epoch), so the same figures come out for
cronstream and for the peer (``bench.peer``) whatever ran the calls.
"""

from __future__ import annotations

from collections import Counter

from bench.common import percentile


def first_arrivals(arrivals: list[tuple[str, int]]) -> dict[str, int]:
    """The earliest arrival (ns) of each fire id."""
    first: dict[str, int] = {}
    for fire_id, at_ns in arrivals:
        if fire_id not in first or at_ns < first[fire_id]:
            first[fire_id] = at_ns
    return first


def duplicates(arrivals: list[tuple[str, int]]) -> int:
    """Arrivals beyond the first of their fire id."""
    return sum(count - 1 for count in Counter(fire_id for fire_id, _ in arrivals).values())


def missing(arrivals: list[tuple[str, int]], expected: dict[str, int]) -> list[str]:
    """The expected fire ids that never arrived, in order."""
    seen = {fire_id for fire_id, _ in arrivals}
    return sorted(fire_id for fire_id in expected if fire_id not in seen)


def run_lags_ms(arrivals: list[tuple[str, int]], expected: dict[str, int]) -> list[float]:
    """Run lag of each expected fire id that arrived: its first arrival minus its due time."""
    return [(first - expected[fire_id] * 1_000_000) / 1e6
            for fire_id, first in first_arrivals(arrivals).items() if fire_id in expected]


def run_figures(arrivals: list[tuple[str, int]], expected: dict[str, int]) -> dict[str, object]:
    """The spike's figures as a receiver saw them. Arrivals of fire ids not expected (another
    run's) are counted apart and left out of everything else; a duplicate counts once for the
    lag and the rate, at its first arrival."""
    ours = [(fire_id, at) for fire_id, at in arrivals if fire_id in expected]
    lags = run_lags_ms(ours, expected)
    firsts = sorted(first_arrivals(ours).values())
    span_s = max(1_000_000, firsts[-1] - firsts[0]) / 1e9 if firsts else float("nan")
    due_ms = min(expected.values()) if expected else 0
    to_last_s = (firsts[-1] - due_ms * 1_000_000) / 1e9 if firsts else float("nan")
    return {
        "runs expected": len(expected),
        "runs received": len(firsts),
        "missing": len(expected) - len(firsts),
        "duplicates": duplicates(ours),
        "unexpected arrivals": len(arrivals) - len(ours),
        "runs/s (first to last arrival)": round(len(firsts) / span_s) if firsts else 0,
        "runs/s (due to last arrival)": round(len(firsts) / to_last_s) if firsts and to_last_s > 0
        else None,
        "run lag p50 ms": _ms(percentile(lags, 50)) if lags else None,
        "run lag p99 ms": _ms(percentile(lags, 99)) if lags else None,
        "run lag max ms": _ms(max(lags)) if lags else None,
    }


def _ms(value: float) -> float:
    return round(value, 1)
