"""``cronstream lag|topology|replay|kafka|ses-events``: the operator's commands, straight against
Kafka (and SES).

These talk to the broker, not to the API, so they work while the API is down — which is when an
operator needs them. ``cronstream kafka TOOL`` runs Kafka's own tools (the same jars as the local
broker) with ``--bootstrap-server`` filled in, for the recipes in docs/operations.md.
``cronstream ses-events`` sets up a tenant's SES event destinations through the SES API
(``CRONSTREAM_SES_ENDPOINT`` and the usual AWS credentials).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from cli.client import emit
from cli.failures import FAILED, USAGE, CliError, ses_failure
from streams.runtime.kafka_config import KafkaSecurity, client_config

KAFKA_TOOLS = {
    "consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "console-producer": "kafka.tools.ConsoleProducer",
    "get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "topics": "org.apache.kafka.tools.TopicCommand",
}
README_BLOCK = re.compile(r"(<!-- topology:begin -->\n```mermaid\n).*?(```\n<!-- topology:end -->)",
                          re.S)


def bootstrap_of(args: argparse.Namespace) -> str:
    """The brokers a command talks to: its ``--bootstrap`` (``kafka TOOL``'s
    ``--bootstrap-server``), else the settings'."""
    from streams.runtime import settings

    return str(explicit_bootstrap(args) or settings.load().bootstrap)


def explicit_bootstrap(args: argparse.Namespace) -> str | None:
    """The brokers the command line names, if it does."""
    tool_args = list(getattr(args, "args", None) or [])
    if "--bootstrap-server" in tool_args[:-1]:
        return str(tool_args[tool_args.index("--bootstrap-server") + 1])
    return getattr(args, "bootstrap", None)


def lag(args: argparse.Namespace) -> int:
    """The table, or what there is none of: said only once Kafka answered (the CLI's probe, and
    any error reading the offsets, end the command with the cause instead)."""
    from ops import lag as lag_

    rows = lag_.read(bootstrap_of(args), args.group or None)
    nothing = (f"no offsets committed and no members in group {', '.join(args.group)}"
               if args.group else "no consumer group has committed offsets or members")
    human = lag_.table(rows) if rows else nothing
    standby = args.standby or settings_().standby_bootstrap
    if not standby:
        emit([r.as_dict() for r in rows], args.json, human)
        return 0
    from ops import replication

    source = settings_().region or "a"
    copied = replication.read(bootstrap_of(args), standby, source)
    emit({"consumer": [r.as_dict() for r in rows],
          "replication": [r.as_dict() for r in copied]}, args.json,
         f"{human}\n\nreplication from region {source} to {standby}:\n{replication.table(copied)}")
    return 0


def settings_() -> Any:
    from streams.runtime import settings

    return settings.load()


def topology(args: argparse.Namespace) -> int:
    from ops import graph

    if args.readme:
        path = Path(args.readme)
        text = path.read_text()
        if not README_BLOCK.search(text):
            raise CliError(f"--readme {path}: no <!-- topology:begin --> block to replace", USAGE)
        path.write_text(README_BLOCK.sub(lambda m: m.group(1) + graph.mermaid() + m.group(2), text))
        print(f"updated the diagram in {path}")
        return 0
    if args.render:
        try:
            print(f"rendered {graph.render(Path(args.render))}")
        except ValueError as exc:
            raise CliError(str(exc), USAGE) from exc
        except RuntimeError as exc:
            raise CliError(str(exc), FAILED) from exc
        return 0
    sys.stdout.write({"text": graph.text, "mermaid": graph.mermaid, "dot": graph.dot}[args.format]())
    return 0


def replay(args: argparse.Namespace) -> int:
    from confluent_kafka import Consumer

    from ops import replay as replay_

    bootstrap = bootstrap_of(args)
    try:
        spec = replay_.topic_named(args.topic)
        probe = Consumer({**client_config(bootstrap), "group.id": "cronstream-replay"})
        try:
            ranges = replay_.plan(probe, spec, args.partition, args.from_offset, args.to_offset,
                                  args.from_time, args.to_time)
        finally:
            probe.close()
    except replay_.ReplayError as exc:
        raise CliError(f"replay: {exc}", USAGE) from exc
    summary: dict[str, Any] = {
        "topic": spec.name, "why_safe": replay_.SAFE[spec.name],
        "ranges": [{"partition": r.partition, "from": r.start, "to": r.end, "records": r.count}
                   for r in ranges if r.count],
    }
    if not args.dry_run:
        summary["copied"] = replay_.copy(bootstrap, spec, ranges)
    human = "\n".join([f"{'would copy' if args.dry_run else 'copied'} {spec.name}: "
                       f"{sum(r.count for r in ranges)} records ({summary['why_safe']})"]
                      + [f"  partition {r['partition']}: offsets {r['from']}..{r['to'] - 1}"
                         for r in summary["ranges"]])
    emit(summary, args.json, human)
    return 0


# each tool's flag for a client config file (TLS/SASL settings)
CONFIG_FLAGS = {"consumer-groups": "--command-config", "console-consumer": "--consumer.config",
                "console-producer": "--producer.config", "get-offsets": "--command-config",
                "topics": "--command-config"}


def kafka(args: argparse.Namespace) -> int:
    """Kafka's tool ``args.tool`` on the local jars, ``--bootstrap-server`` defaulted."""
    from streams.runtime import settings

    conf = settings.load()
    lib = conf.home / "lib"
    if not lib.is_dir():
        raise CliError(f"kafka: no Kafka jars in {lib}; run ./dev stack up first", USAGE)
    rest = list(args.args)
    if "--bootstrap-server" not in rest:
        rest = ["--bootstrap-server", bootstrap_of(args), *rest]
    security = KafkaSecurity.from_env()
    if security.protocol != "PLAINTEXT" and CONFIG_FLAGS[args.tool] not in rest:
        # the same settings as every other client (streams.runtime.kafka_config), as the
        # tool's client config file (it holds the password: 0600, in the stack's home)
        config = conf.home / "tools-client.properties"
        config.touch(mode=0o600)
        config.write_text("\n".join([*security.java_properties(), ""]))
        rest = [CONFIG_FLAGS[args.tool], str(config), *rest]
    logging = conf.home / "tools-log4j.properties"  # warnings to stderr, not log4j's complaints
    if not logging.exists():
        logging.write_text("log4j.rootLogger=WARN, stderr\n"
                           "log4j.appender.stderr=org.apache.log4j.ConsoleAppender\n"
                           "log4j.appender.stderr.Target=System.err\n"
                           "log4j.appender.stderr.layout=org.apache.log4j.PatternLayout\n"
                           "log4j.appender.stderr.layout.ConversionPattern=[%p] %m%n\n")
    command = ["java", f"-Dlog4j.configuration=file:{logging}", "-cp", f"{lib}/*",
               KAFKA_TOOLS[args.tool], *rest]
    return subprocess.run(command).returncode


def region_status(args: argparse.Namespace) -> int:
    from ops import region

    store = _authority()
    found = region.status(store)
    emit(found, args.json, region.status_text(found))
    return 0


def region_name(text: str) -> str:
    """``--to``: a name a region's processes can have (``CRONSTREAM_REGION``'s rule), refused
    before the authority is reached: a promotion to a region that cannot exist would depose the
    active one with nothing to take over."""
    from streams.runtime.settings import REGION_NAME

    if not REGION_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a region name: 1 to 32 lower-case "
                                         "letters, digits or '-'")
    return text


def region_promote(args: argparse.Namespace) -> int:
    """The promotion's steps (``ops.region.promote``); in a local two-region stack's home the
    site's are done too (MirrorMaker stopped, the promoted region's sink, workers and API
    started), elsewhere they are said for the operator to do."""
    from ops import region
    from stack.two_regions import NAMES

    local = _local_site(args.workers)
    if local is not None and args.to not in NAMES:
        raise CliError(f"region promote: --to {args.to!r}: the local two-region stack has "
                       f"regions {' and '.join(NAMES)}; nothing was changed", USAGE)
    site = local or region.Site(
        stop_replication=lambda: print("stop MirrorMaker 2 into the new region now (it must "
                                       "copy nothing of the old region after this)"),
        rewind_marks=lambda name: _rewind(args.standby),
        start_region=lambda name: print(f"start region {name}'s sinks, workers and API now"))
    try:
        done, figures = region.promote(_authority(), args.to, planned=not args.unplanned,
                                       site=site, say=lambda line: print(f"[region] {line}"),
                                       wait_s=args.wait)
    except region.PromotionFailed as exc:
        raise CliError(f"region promote: {exc}", FAILED) from exc
    emit({"epoch": done.row.epoch, "active": done.row.active, "deposed": done.deposed,
          "planned": done.planned, "horizon_ms": done.row.horizon_ms,
          "lease_ended_s": figures.lease_ended_s, "promoted_s": figures.promoted_s,
          "started_s": figures.started_s}, args.json,
         f"region {done.row.active} active under epoch {done.row.epoch}; promoted "
         f"{figures.promoted_s:.1f} s and started {figures.started_s:.1f} s after the command")
    return 0


def _rewind(bootstrap: str | None) -> object:
    """Outside the local stack: the promoted region's brokers are ``--standby`` (default
    ``CRONSTREAM_STANDBY_BOOTSTRAP``); with neither, the operator is told to."""
    from streams.scheduling import progress

    where = bootstrap or settings_().standby_bootstrap
    if not where:
        return "not done: give --standby (the promoted region's brokers)"
    return progress.rewind_marks(where)


def _authority() -> Any:
    from streams.runtime.authority import Store

    return Store(settings_().authority_dsn)


def _local_site(workers: int) -> Any:
    """The local two-region stack's site, if this home is its region a (``stack.two_regions``)."""
    from ops import region, replication
    from stack import two_regions as regions

    both = regions.of_home(settings_())
    if both is None:
        return None

    def lag() -> int | None:
        active = region.status(both.authority)["active"]
        source = both.stack(str(active))
        standby = both.b if source is both.a else both.a
        rows = replication.read(source.s.bootstrap, standby.s.bootstrap, str(active))
        return replication.summary(rows)[0]

    def start(name: str) -> None:
        target = both.stack(name)
        target.register_sink()
        target.start_apps(workers)

    def rewind(name: str) -> dict[int, tuple[int, int]]:
        from streams.scheduling import progress

        return progress.rewind_marks(both.stack(name).s.bootstrap)

    return region.Site(stop_replication=both.stop_mirror, replication_lag=lag,
                       rewind_marks=rewind, start_region=start)


def ses_events(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from streams.adapters import ses

    names = [ses.configuration_set(args.tenant, pool) for pool in args.pool or ["default"]]
    if args.reminders:
        names.append(ses.configuration_set(args.tenant))
    conf = settings_()
    client = ses.client(conf.ses_endpoint_url, conf.aws_region)
    where = conf.ses_endpoint_url or f"AWS ({client.meta.region_name})"
    for name in names:
        try:
            done = ses.ensure_event_destination(client, name, args.topic_arn)
        except (BotoCoreError, ClientError) as exc:
            failure = ses_failure(where, exc)
            raise CliError(f"configuration set {name}: {failure}", failure.code) from exc
        print(f"{name}: {done} -> {args.topic_arn} ({', '.join(ses.EVENT_TYPES)})")
    return 0


def add_parsers(sub: Any) -> None:
    broker = argparse.ArgumentParser(add_help=False)
    broker.add_argument("--bootstrap", default=None, help="default: the local stack's broker")

    p = sub.add_parser("lag", parents=[broker], help="consumer lag per group/topic/partition, "
                       "read from Kafka's offsets (as kafka-consumer-groups --describe)")
    p.add_argument("--group", action="append", help="only this group (repeatable)")
    p.add_argument("--standby", default=None, help="the standby region's brokers: the "
                   "replication lag too (default CRONSTREAM_STANDBY_BOOTSTRAP; docs/regions.md)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=lag, needs=("kafka",))

    p = sub.add_parser("topology", help="the stream graph from streams/topology.py")
    p.add_argument("--format", choices=["text", "mermaid", "dot"], default="text")
    p.add_argument("--render", metavar="FILE.svg|FILE.png", help="render with Graphviz")
    p.add_argument("--readme", metavar="README.md", help="rewrite the diagram block of this file")
    p.set_defaults(func=topology)

    p = sub.add_parser("replay", parents=[broker], help="copy a range of fired/fanout/ledger "
                       "back onto the same partitions (consumers are idempotent)")
    p.add_argument("--topic", required=True, help="fired, fanout or ledger")
    p.add_argument("--partition", type=int, action="append", help="default: every partition")
    p.add_argument("--from-offset", type=int)
    p.add_argument("--from-time", help="RFC 3339, e.g. 2026-11-22T10:00:00Z")
    p.add_argument("--to-offset", type=int, help="exclusive; default: the end")
    p.add_argument("--to-time", help="RFC 3339, exclusive")
    p.add_argument("--dry-run", action="store_true", help="print the ranges, copy nothing")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=replay, needs=("kafka",))

    p = sub.add_parser("ses-events", help="make a tenant's SES configuration set publish its "
                       "events to an SNS topic (created or updated; docs/operations.md)")
    p.add_argument("--tenant", required=True)
    p.add_argument("--pool", action="append", help="an IP pool its campaigns use (repeatable; "
                   "default: default)")
    p.add_argument("--reminders", action="store_true",
                   help="also the configuration set of its reminder emails (cronstream-<tenant>)")
    p.add_argument("--topic-arn", required=True, help="the SNS topic the API is subscribed to")
    p.set_defaults(func=ses_events)

    p = sub.add_parser("region", help="the active region and its promotion (docs/regions.md)")
    rsub = p.add_subparsers(dest="region_command", required=True)
    s = rsub.add_parser("status", help="the authority: active region, epoch, lease, history")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=region_status, needs=("postgres",))
    s = rsub.add_parser("promote", help="make a region active: planned (drain, hand over) or "
                        "--unplanned (the active region is lost)")
    s.add_argument("--to", required=True, type=region_name,
                   help="the region to make active (a or b locally)")
    s.add_argument("--unplanned", action="store_true", help="the active region is unreachable: "
                   "its reservations and its lease's end are inherited (docs/regions.md)")
    s.add_argument("--workers", type=int, default=1, help="local stack: workers to start there")
    s.add_argument("--standby", default=None, help="the promoted region's brokers, where an "
                   "unplanned promotion rewinds the schedulers' marks (default "
                   "CRONSTREAM_STANDBY_BOOTSTRAP; the local stack knows its own)")
    s.add_argument("--wait", type=float, default=120.0,
                   help="seconds to wait for the old lease to end and the copy to catch up")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=region_promote, needs=("postgres",))

    p = sub.add_parser("kafka", help="run a Kafka tool on the local jars: " + ", ".join(KAFKA_TOOLS))
    p.add_argument("tool", choices=sorted(KAFKA_TOOLS))
    p.add_argument("args", nargs=argparse.REMAINDER, help="passed to the tool")
    p.set_defaults(func=kafka, needs=("kafka",))
