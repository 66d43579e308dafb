"""Our cron engine against croniter, and fastavro against the reference ``avro`` package, no broker.

    .venv/bin/python -m bench.cron [--seconds 0.5] [--zones UTC America/New_York]

Why: docs/architecture.md says cronstream computes next fire times with its own engine
(``streams.scheduling.cron``) because croniter was too slow for the scheduler, which computes
one next time per fire (10k fires/s in a spike) and one per job when it takes over a partition
(1M jobs), and encodes every record with fastavro rather than ``avro``. This is the figure
behind both.

For each expression below, on the same start times (spread over 2026, so a search starts at
every hour of the day), each engine in turn:

- **next**: next fire times computed per second of CPU. Ours is the scheduler's own call
  (``schedule._next_cron_from`` without its cache of searches, so every call searches; the parse
  is cached, as in the scheduler); croniter's is ``get_next`` on one ``croniter`` object per
  expression, restarted at each start (a pytz zone, which its DST arithmetic is written for),
  and, as cronstream called it before it had its own engine, a new ``croniter`` each time.
- **parse**: expressions parsed per second of CPU. Ours is ``cron.parse`` with its caches emptied
  before each call; croniter's is ``croniter.expand``.

Both engines agree on these expressions (tests/unit/scheduling/test_cron_vs_croniter.py). The Avro part
encodes and decodes one ``Fired`` record (the scheduler writes one per slot) with the schema from
``schemas/``, with ``fastavro.schemaless_writer``/``schemaless_reader`` and with ``avro.io``'s
``DatumWriter``/``DatumReader``, after checking that both write the same bytes; it is left out,
saying so, when ``avro`` (in the ``test`` extra) is not installed. CPU time is the process's own
(``time.process_time``): other work on the box does not count, and a run takes a few seconds.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import fastavro
import pytz
from croniter import croniter

from bench.common import report
from streams.runtime import codec as codec_module
from streams.runtime.codec import SCHEMAS_DIR, codec
from streams.runtime.settings import REPO_ROOT
from streams.scheduling import cron, schedule

# (ours, what it fires) — typical jobs, a 6-field one and the slowest kinds to search
EXPRESSIONS = (
    ("*/5 * * * *", "every 5 minutes"),
    ("0 9 * * MON-FRI", "09:00 on weekdays"),
    ("15,45 8-18 * * 1-5", "twice an hour in office hours"),
    ("30 2 * * *", "02:30 daily (in the DST gap in spring)"),
    ("0 0 1 * *", "monthly"),
    ("0 0 13 * FRI", "the 13th or a Friday"),
    ("0 0 1 1 *", "yearly"),
    ("0 12 29 2 *", "Feb 29 (every 4 years)"),
    ("*/10 * * * * *", "every 10 seconds (6 fields)"),
)
STARTS = 2000  # start times per expression, cycled


def theirs(expr: str) -> str:
    """croniter's spelling: seconds last instead of first."""
    fields = expr.split()
    return " ".join([*fields[1:], fields[0]]) if len(fields) == 6 else expr


def rate(operation: Callable[[int], object], seconds: float) -> float:
    """Calls of ``operation(i)`` per CPU second, ``i`` counting up, over at least ``seconds``."""
    operation(0)  # warm: first-call imports and caches that are not the steady state
    calls, batch = 0, 64
    started = time.process_time()
    while (spent := time.process_time() - started) < seconds:
        for i in range(calls, calls + batch):
            operation(i)
        calls += batch
    return calls / spent


def starts(count: int) -> list[int]:
    """``count`` start times (ms) spread evenly over 2026, each at an odd millisecond."""
    first = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
    span = int(datetime(2027, 1, 1, tzinfo=UTC).timestamp() * 1000) - first
    return [first + span * i // count + 12_345 for i in range(count)]


def next_rates(expr: str, zone: str, at: list[int], seconds: float) -> tuple[float, float, float]:
    """Next times per second: ours, croniter reusing one object, croniter with a new one each."""
    search = schedule._next_cron_from.__wrapped__  # the search itself, not its cache
    schedule.compiled(expr, "j")  # parsed once, as the scheduler has it cached
    ours = rate(lambda i: search(expr, (), zone, "shift", "first", at[i % len(at)]), seconds)
    tz = pytz.timezone(zone)
    local = [datetime.fromtimestamp(ms / 1000, tz) for ms in at]
    spelled = theirs(expr)
    engine = croniter(spelled, local[0])
    reused = rate(lambda i: engine.get_next(float, start_time=local[i % len(local)]), seconds)
    fresh = rate(lambda i: croniter(spelled, local[i % len(local)]).get_next(float), seconds)
    return ours, reused, fresh


def _parse_cold(expr: str) -> cron.CronSpec:
    cron._plain_field.cache_clear()
    cron._hash_plan.cache_clear()
    cron._some_day_matches.cache_clear()
    return cron.parse(expr)


def parse_rates(expr: str, seconds: float) -> tuple[float, float]:
    spelled = theirs(expr)
    return (rate(lambda _i: _parse_cold(expr), seconds),
            rate(lambda _i: croniter.expand(spelled), seconds))


def fired_record() -> dict[str, Any]:
    """A whole ``Fired`` record, every default filled in (``avro`` fills none)."""
    fired = {"fire_id": "job-0000042@2026-03-08T07:30:00.000Z", "job_id": "job-0000042",
             "tenant": "acme", "job_revision": 3, "nominal_ms": 1_772_955_000_000,
             "fired_ms": 1_772_955_000_180, "decision": "fired", "epoch": 2,
             "target": {"type": "webhook", "url": "https://hooks.example.test/nightly",
                        "headers": {"x-team": "billing"}}}
    return codec().decode(codec().encode("Fired", fired))


def avro_rates(seconds: float) -> dict[str, Any]:
    try:
        import avro.io
        import avro.schema
    except ImportError:
        return {"skipped": "the avro package is not installed (pip install avro)"}
    types = {codec_module._full_name(doc): doc for doc in
             (json.loads(p.read_text()) for p in sorted((SCHEMAS_DIR / "types").glob("*.avsc")))}
    expanded = codec_module._expand(json.loads((SCHEMAS_DIR / "fired.avsc").read_text()), types, set())
    fast_schema = fastavro.parse_schema(expanded)
    slow_schema = avro.schema.parse(json.dumps(expanded))
    writer, reader = avro.io.DatumWriter(slow_schema), avro.io.DatumReader(slow_schema)
    record = fired_record()

    def fast_encode(_i: int) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, fast_schema, record)
        return buf.getvalue()

    def slow_encode(_i: int) -> bytes:
        buf = io.BytesIO()
        writer.write(record, avro.io.BinaryEncoder(buf))
        return buf.getvalue()

    body = fast_encode(0)
    if slow_encode(0) != body:
        raise SystemExit("fastavro and avro wrote different bytes for the same record")
    return {
        "record": f"Fired, {len(body)} bytes",
        "encode/s fastavro": round(rate(fast_encode, seconds)),
        "encode/s avro": round(rate(slow_encode, seconds)),
        "decode/s fastavro": round(rate(
            lambda _i: fastavro.schemaless_reader(io.BytesIO(body), fast_schema), seconds)),
        "decode/s avro": round(rate(
            lambda _i: reader.read(avro.io.BinaryDecoder(io.BytesIO(body))), seconds)),
    }


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5,
                        help="CPU seconds per engine, expression and measure (default 0.5)")
    parser.add_argument("--zones", nargs="+", default=["UTC", "America/New_York"])
    args = parser.parse_args()

    at = starts(STARTS)
    figures: dict[str, Any] = {}
    totals: dict[str, list[float]] = {key: [] for key in (
        "ours next", "croniter next", "croniter new + next", "ours parse", "croniter parse")}
    print(f"{'expression':<20} {'zone':<16} {'next/s: ours':>12} {'croniter':>9} {'×':>5} "
          f"{'(new each)':>10}   {'parse/s: ours':>13} {'croniter':>9} {'×':>5}")
    for expr, meaning in EXPRESSIONS:
        ours_parse, their_parse = parse_rates(expr, args.seconds)
        totals["ours parse"].append(ours_parse)
        totals["croniter parse"].append(their_parse)
        for zone in args.zones:
            ours_next, their_next, their_fresh = next_rates(expr, zone, at, args.seconds)
            totals["ours next"].append(ours_next)
            totals["croniter next"].append(their_next)
            totals["croniter new + next"].append(their_fresh)
            print(f"{expr:<20} {zone:<16} {ours_next:>12,.0f} {their_next:>9,.0f} "
                  f"{ours_next / their_next:>5.1f} {their_fresh:>10,.0f}   {ours_parse:>13,.0f} "
                  f"{their_parse:>9,.0f} {ours_parse / their_parse:>5.1f}")
            figures[f"{expr} ({meaning}), {zone}"] = {
                "next/s ours": round(ours_next), "next/s croniter": round(their_next),
                "next/s croniter, new object each": round(their_fresh),
                "parse/s ours": round(ours_parse), "parse/s croniter": round(their_parse)}
    for key, values in totals.items():  # the harmonic mean: the rate of doing each once
        mean = len(values) / sum(1 / v for v in values)
        figures[f"{key}/s (harmonic mean)"] = f"{mean:,.0f} ({1e6 / mean:.1f} µs each)"
    figures["fastavro vs avro"] = avro_rates(args.seconds)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=REPO_ROOT).stdout.strip()
    report("cron", figures, {
        "seconds": args.seconds, "zones": args.zones, "starts": STARTS, "commit": commit,
        "croniter": _version("croniter"), "pytz": _version("pytz"), "fastavro": _version("fastavro"),
        "avro": _version("avro"),
    })
    print(f"  at {commit}: croniter {_version('croniter')}, fastavro {_version('fastavro')}, "
          f"avro {_version('avro')}; CPU time of this process")


if __name__ == "__main__":
    main()
