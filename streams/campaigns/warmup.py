"""IP pool warm-up: how many emails a dedicated pool may send on a given UTC day. Pure.

Mailbox providers judge a new IP by its history, so a pool starts small and grows: day 0 sends
``initial_daily_cap``, each later day ``growth`` times more, up to ``max_daily_cap``. The cap is
split across the recipient partitions (each walker enforces its partition's quota from a
co-partitioned table), so the pool never exceeds it however the partitions are spread over
workers. A chunk is sent whole or not at all, so a partition may leave up to one chunk (< 50) of
its quota unused; a chunk that does not fit waits for the next UTC day, or expires at the
campaign's deadline with the reason.
"""

from __future__ import annotations

from typing import Any

from streams.records import IpPoolWarmup

DAY_MS = 86_400_000


def utc_day(ms: int) -> int:
    return ms // DAY_MS


def daily_cap(plan: IpPoolWarmup, now_ms: int) -> int:
    days = max(0, utc_day(now_ms) - utc_day(plan["warmup_start_ms"]))
    cap = plan["initial_daily_cap"] * plan["growth"] ** min(days, 200)
    ceiling = plan["max_daily_cap"]
    return int(cap if ceiling is None else min(cap, ceiling))


def partition_quota(cap: int, partitions: int, partition: int) -> int:
    """This partition's share of ``cap``; the shares add up to exactly ``cap``."""
    return cap // partitions + (1 if partition < cap % partitions else 0)


def ms_until_next_day(now_ms: int) -> int:
    return (utc_day(now_ms) + 1) * DAY_MS - now_ms


def parse_plan(text: str, now_ms: int) -> tuple[str, dict[str, Any]]:
    """``NAME=INITIAL[:GROWTH[:MAX]]`` (the CLI's ``--ip-pool``) → (name, plan)."""
    name, sep, spec = text.partition("=")
    parts = spec.split(":")
    try:
        if not sep or not name or not 1 <= len(parts) <= 3:
            raise ValueError
        initial = int(parts[0])
        growth = float(parts[1]) if len(parts) > 1 and parts[1] else 1.5
        ceiling = int(parts[2]) if len(parts) > 2 and parts[2] else None
    except ValueError:
        raise ValueError(f"{text!r} is not NAME=INITIAL[:GROWTH[:MAX]] "
                         "(e.g. pool-a=5000:1.5:1000000)") from None
    if initial < 1 or growth < 1 or (ceiling is not None and ceiling < initial):
        raise ValueError(f"{text!r}: INITIAL >= 1, GROWTH >= 1 and MAX >= INITIAL")
    return name, {"warmup_start_ms": now_ms, "initial_daily_cap": initial, "growth": growth,
                  "max_daily_cap": ceiling}
