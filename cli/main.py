"""Entry point of the ``cronstream`` console script.

Every command ends in one of the exit codes of ``cli.failures`` and, when it fails, in one line
naming what it tried, the cause and the next step: never a traceback (``--verbose`` adds it,
and librdkafka's own log lines). A command that needs Kafka, PostgreSQL or Kafka Connect
(``needs``) reaches it first; a command that talks to Kafka uses the client settings of the
stack's home (``CRONSTREAM_HOME``, made ``--secure``) for each one the environment leaves unset.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import traceback
from collections.abc import Iterator

from cli import operate, resources
from cli.failures import (
    CONNECT_NEXT_STEP,
    FAILED,
    OK,
    USAGE,
    CliError,
    explain,
    http_failure,
    one_line,
    postgres_failure,
)

# how long a short command waits for a broker that does not answer (a refused connection ends
# it at once); a worker and the API wait longer at start (streams.runtime.admin.check_reachable)
KAFKA_WAIT_S = 10.0
# commands whose processes run on (their librdkafka log lines are their logs)
SERVICES = ("worker", "api")


def _stack(args: argparse.Namespace) -> int:
    from stack import two_regions as regions
    from stack.local import Stack, StackError
    from streams.runtime import settings

    conf = settings.load()
    stack = Stack(conf)
    both = regions.Regions.of(conf) if args.regions == 2 else regions.of_home(conf)
    try:
        if both is not None and args.action == "up":
            both.up(workers=args.workers)
        elif both is not None and args.action == "down":
            both.down()
        elif both is not None:
            for name, states in both.status().items():
                for part, state in states.items():
                    print(f"{name}: {part:<12} {state}")
        elif args.action == "up":
            part = "services" if args.services_only else "apps" if args.apps_only else "all"
            brokers = args.brokers if args.brokers is not None else conf.brokers
            stack.up(with_app=not args.infra_only, workers=args.workers, brokers=brokers,
                     secure=True if args.secure else None, part=part, kafka_auth=args.kafka_auth)
            if stack.secure:
                print(f"[stack] Kafka listens on SASL_SSL, mTLS and OAUTHBEARER; its clients use "
                      f"{stack.kafka_auth}; the CLI reads their settings from this home, other "
                      f"clients: source {stack.secure_dir / 'client.env'}")
        elif args.action == "down":
            stack.down()
        else:
            states = stack.status()
            for name, state in states.items():
                print(f"{name:<12} {state}")
            if states["kafka"] != "stopped":  # topics replicated below the setting, never hidden
                print(f"{'replication':<12} {stack.replication_report()}")
    except StackError as exc:
        raise CliError(str(exc), FAILED) from exc
    return OK


def _worker(args: argparse.Namespace) -> int:
    sys.argv = ["cronstream-worker", "worker", "--loglevel", args.loglevel]
    from streams.worker import main

    main()
    return 0


def _api(args: argparse.Namespace) -> int:
    import uvicorn

    from streams.runtime import admin, settings

    conf = settings.check_or_exit("api")  # every setting's problem, one line each, now
    conf.kafka_security  # noqa: B018 - a setting that cannot work stops here, in one line
    # here too, not only in the app's start: uvicorn logs a failed start with its traceback
    admin.check_reachable(conf.bootstrap)
    # an idle keep-alive connection outlives its clients' pools: uvicorn closes one after 5 s by
    # default, exactly when httpx's pool (keepalive_expiry 5 s) may still reuse it, and the
    # request sent as the server closes gets "Server disconnected without sending a response"
    # (encode/httpx#96; seen in a fresh-clone run's 30 concurrent opt-outs). Load balancers idle
    # out at 60 s (AWS ALB), so the server waits longer than any of them
    uvicorn.run("api.app:create_app", factory=True, host=args.host or conf.api_host,
                port=args.port or conf.api_port, log_level="info", timeout_keep_alive=75)
    return 0


def _sink(args: argparse.Namespace) -> int:
    from pathlib import Path

    from stack.local import StackError, register_sink
    from streams.runtime import settings

    conf = settings.load()
    try:
        register_sink(args.connect_url or conf.connect_url, conf,
                      schemas_dir=Path(args.schemas_dir))
    except StackError as exc:
        raise CliError(str(exc), FAILED) from exc
    return OK


def _topics(args: argparse.Namespace) -> int:
    """``topics align``: the delete-policy topics' retention as the topology declares it (an
    upgrade's step: ``cronstream.recipients`` made by an older version kept 7 days)."""
    from streams.runtime import admin, settings

    for change in admin.align_retention(settings.load().bootstrap) or ["every topic as declared"]:
        print(change)
    return 0


def _recipients(args: argparse.Namespace) -> int:
    """``recipients prune``: what the API's pruner does each hour, now, printed per partition."""
    from streams.campaigns import retention
    from streams.runtime import settings

    conf = settings.load()
    for part, before, after in retention.prune_report(conf.bootstrap, conf.partitions,
                                                      dry_run=args.dry_run):
        print(f"partition {part}: log start {before} -> {after} "
              f"({after - before} records {'would go' if args.dry_run else 'deleted'})")
    return 0


def _config(args: argparse.Namespace) -> int:
    """``config check``: every setting's effective value (secrets masked) and where it came
    from, then each problem a worker and the API would stop at; exit 2 (usage) if any."""
    from streams.runtime import settings

    conf = settings.load()
    rows = settings.effective(conf, origins=dict.fromkeys(args.adopted, "home"))
    width = max(len(name) for name, _, _ in rows)
    for name, value, source in rows:
        print(f"{name:<{width}}  {value}  [{source}]")
    roles = ("worker", "api") if args.role == "all" else (args.role,)
    problems = sorted({p for role in roles for p in settings.validate(conf, role)})
    for problem in problems:
        print(f"config: {problem}", file=sys.stderr)
    return USAGE if problems else OK


def _tenant(args: argparse.Namespace) -> int:
    import json

    from streams.adapters import tenants
    from streams.campaigns import warmup
    from streams.runtime import settings
    from streams.runtime.clock import now_ms

    try:
        pools = dict(warmup.parse_plan(text, now_ms()) for text in args.ip_pool)
    except ValueError as exc:
        raise CliError(f"--ip-pool: {exc}", USAGE) from exc
    try:
        conf = settings.load()
        api_key = tenants.create(
            conf.bootstrap, args.name, partitions=conf.partitions,
            allowed_targets=args.allow_target,
            max_jobs=args.max_jobs, min_interval_s=args.min_interval_s,
            requests_per_s=args.requests_per_s, ip_pools=pools, senders=args.sender,
            pools=args.pool, max_campaigns=args.max_campaigns,
            max_recipients=args.max_recipients, max_suppressions=args.max_suppressions,
            max_fires_per_s=args.max_fires_per_s, sms_originations=args.sms_origination)
    except ValueError as exc:
        raise CliError(str(exc), USAGE) from exc
    except RuntimeError as exc:  # the broker did not acknowledge the record
        raise CliError(str(exc), FAILED) from exc
    if args.json:
        print(json.dumps({"tenant": args.name, "api_key": api_key}))
    else:
        print(f"tenant {args.name} created; its API key (shown once, stored hashed):\n{api_key}")
    return 0


def _tenant_update(args: argparse.Namespace) -> int:
    """Grants and limits of an existing tenant, its key kept."""
    import json

    from streams.adapters import tenants
    from streams.runtime import settings

    limits = {name: getattr(args, name) for name in ("max_jobs", "max_campaigns", "max_recipients",
                                                      "max_suppressions", "requests_per_s",
                                                      "max_fires_per_s")
              if getattr(args, name) is not None}
    try:
        conf = settings.load()
        record = tenants.update(conf.bootstrap, args.name, partitions=conf.partitions,
                                grant_senders=args.sender,
                                revoke_senders=args.revoke_sender, grant_pools=args.pool,
                                revoke_pools=args.revoke_pool,
                                grant_sms_originations=args.sms_origination,
                                revoke_sms_originations=args.revoke_sms_origination, **limits)
    except (ValueError, LookupError) as exc:
        raise CliError(str(exc), USAGE) from exc
    except RuntimeError as exc:  # the broker did not acknowledge the record
        raise CliError(str(exc), FAILED) from exc
    shown = {k: record[k] for k in ("tenant", "senders", "pools", "sms_originations", *limits)}
    print(json.dumps(shown) if args.json else
          f"tenant {args.name}: senders {', '.join(record['senders']) or '(none)'}; pools "
          f"{', '.join(['default', *record['pools'], *record['ip_pools']])}; sms originations "
          f"{', '.join(record['sms_originations']) or '(none)'}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from cli import demo
    from stack.local import Stack, StackError
    from streams.runtime import settings

    conf = settings.load()
    try:
        Stack(conf).up(with_app=True)
    except StackError as exc:
        raise CliError(str(exc), FAILED) from exc
    args.adopted = adopt_home_settings(args)  # a secure home's, now that it is up
    return demo.run(conf, args.seconds, args.receiver_port)


def at_least_one(text: str) -> int:
    """An argument that must be a whole number >= 1 (argparse names the flag in its error, and
    nothing is reached or written)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cronstream", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    stack = sub.add_parser("stack", help="the local Kafka/Connect/PostgreSQL stack")
    stack.add_argument("action", choices=["up", "down", "status"])
    stack.add_argument("--infra-only", action="store_true",
                       help="start Kafka, Connect and PostgreSQL but no worker or API")
    stack.add_argument("--workers", type=int, default=1, help="worker processes to start")
    stack.add_argument("--services-only", action="store_true",
                       help="PostgreSQL and Kafka only, listening on CRONSTREAM_STACK_HOST")
    stack.add_argument("--apps-only", action="store_true",
                       help="Connect, its sinks, the SES server, workers and the API, against "
                       "the Kafka and PostgreSQL the settings name")
    stack.add_argument("--secure", action="store_true",
                       help="a SASL_SSL listener (SCRAM-SHA-512 and PLAIN) with a CA and broker "
                       "certificate generated into CRONSTREAM_HOME, and beside it a listener "
                       "requiring a client certificate and one taking OAUTHBEARER tokens "
                       "(Kafka's unsecured validator); fixed per CRONSTREAM_HOME")
    stack.add_argument("--kafka-auth", default=None, metavar="scram|mtls|oauth",
                       help="how Connect, the workers and the API of a secure stack authenticate "
                       "(default: as last time, first scram); those running another way restart "
                       "(stack.local.KAFKA_AUTHS)")
    stack.add_argument("--brokers", type=int, default=None,
                       help="default: $CRONSTREAM_BROKERS; "
                       "KRaft nodes (broker + controller each) to start: 1 (the default) or "
                       "3 for a three-voter quorum with replicated topics; fixed per CRONSTREAM_HOME")
    stack.add_argument("--regions", type=int, choices=[1, 2], default=1,
                       help="2: a second region (docs/regions.md): its own Kafka cluster and "
                       "Connect on the ports CRONSTREAM_STANDBY_PORT_OFFSET (1000) above, "
                       "MirrorMaker 2 copying the active region into it; `down` and `status` "
                       "of such a home cover both")
    stack.set_defaults(func=_stack)

    worker = sub.add_parser("worker", help="run one stream worker (scheduler + executor)")
    worker.add_argument("--loglevel", default="info")
    worker.set_defaults(func=_worker)

    api = sub.add_parser("api", help="run the HTTP API")
    api.add_argument("--port", type=int, default=None)
    api.add_argument("--host", default=None, help="bind address (default CRONSTREAM_API_HOST, "
                     "else 127.0.0.1; 0.0.0.0 in containers)")
    api.set_defaults(func=_api)

    tenant = sub.add_parser("tenant", help="tenants and their API keys")
    tenant_sub = tenant.add_subparsers(dest="tenant_command", required=True)
    create = tenant_sub.add_parser("create", help="create a tenant (or rotate its key) and "
                                   "print its API key")
    create.add_argument("name")
    create.add_argument("--allow-target", action="append", default=[], metavar="HOST_OR_CIDR",
                        help="let webhooks reach this private/loopback host or network")
    create.add_argument("--max-jobs", type=int, default=100_000)
    create.add_argument("--min-interval-s", type=int, default=1)
    create.add_argument("--requests-per-s", type=int, default=100)
    create.add_argument("--ip-pool", action="append", default=[], metavar="NAME=INITIAL[:GROWTH[:MAX]]",
                        help="a dedicated IP pool with a warm-up plan: INITIAL emails on day 0, "
                        "times GROWTH (default 1.5) each UTC day, up to MAX (repeatable; "
                        "re-running create restarts the warm-up)")
    create.add_argument("--sender", action="append", default=[], metavar="ADDRESS_OR_DOMAIN",
                        help="a verified SES identity its mail may be from (repeatable); none: "
                        "it sends no mail")
    create.add_argument("--pool", action="append", default=[], metavar="NAME",
                        help="a dedicated IP pool it may send through, besides 'default' "
                        "(repeatable)")
    create.add_argument("--sms-origination", action="append", default=[], metavar="IDENTITY",
                        help="an End User Messaging SMS origination its texts may be sent from: "
                        "an E.164 number, a phone/pool/sender id or ARN, a sender id, or "
                        "account-default (texts naming none; AWS picks from the account's) "
                        "(repeatable); none: it sends no text")
    create.add_argument("--max-campaigns", type=int, default=1000)
    create.add_argument("--max-recipients", type=int, default=50_000_000,
                        help="recipients one campaign may hold")
    create.add_argument("--max-suppressions", type=int, default=10_000_000,
                        help="suppressions it may add through the API")
    create.add_argument("--max-fires-per-s", type=at_least_one, default=10_000,
                        help="runs it may start per second across the cluster (at least 1); "
                        "slots past it wait, and expire past their max_lateness_s")
    create.add_argument("--json", action="store_true", help="print JSON for scripts")
    create.set_defaults(func=_tenant, needs=("kafka",))
    update = tenant_sub.add_parser("update", help="grant or revoke senders, pools and SMS "
                                   "originations, or change limits, keeping the tenant's key")
    update.add_argument("name")
    update.add_argument("--sender", action="append", default=[], metavar="ADDRESS_OR_DOMAIN")
    update.add_argument("--revoke-sender", action="append", default=[], metavar="ADDRESS_OR_DOMAIN")
    update.add_argument("--pool", action="append", default=[], metavar="NAME")
    update.add_argument("--revoke-pool", action="append", default=[], metavar="NAME")
    update.add_argument("--sms-origination", action="append", default=[], metavar="IDENTITY",
                        help="grant an SMS origination (as for create; repeatable)")
    update.add_argument("--revoke-sms-origination", action="append", default=[],
                        metavar="IDENTITY")
    for limit in ("--max-jobs", "--max-campaigns", "--max-recipients", "--max-suppressions",
                  "--requests-per-s"):
        update.add_argument(limit, type=int, default=None)
    update.add_argument("--max-fires-per-s", type=at_least_one, default=None)
    update.add_argument("--json", action="store_true", help="print JSON for scripts")
    update.set_defaults(func=_tenant_update, needs=("kafka",))

    sink = sub.add_parser("sink", help="register the ledger → Postgres Kafka Connect sink")
    sink.add_argument("action", choices=["register"])
    sink.add_argument("--connect-url", default=None,
                      help="Kafka Connect's REST URL (default CRONSTREAM_CONNECT_URL)")
    sink.add_argument("--schemas-dir", required=True, help="schemas/ as the Connect worker sees it")
    sink.set_defaults(func=_sink, needs=("postgres", "connect"))

    topics = sub.add_parser("topics", help="cronstream's topics on the cluster")
    topics.add_argument("action", choices=["align"],
                        help="align: set the delete-policy topics' retention.ms as declared")
    topics.set_defaults(func=_topics, needs=("kafka",))

    recipients = sub.add_parser("recipients", help="cronstream.recipients")
    recipients.add_argument("action", choices=["prune"], help="delete what no campaign can read "
                            "any more (the API does it every CRONSTREAM_RECIPIENTS_PRUNE_INTERVAL_S)")
    recipients.add_argument("--dry-run", action="store_true", help="say it, delete nothing")
    recipients.set_defaults(func=_recipients, needs=("kafka",))

    config = sub.add_parser("config", help="the effective configuration")
    config.add_argument("action", choices=["check"])
    config.add_argument("--role", choices=["all", "worker", "api", "cli"], default="all",
                        help="whose start-up checks to apply (default: a worker's and the API's)")
    config.set_defaults(func=_config)

    resources.add_parsers(sub)
    operate.add_parsers(sub)

    demo = sub.add_parser("demo", help="start the stack and watch a schedule fire")
    demo.add_argument("--seconds", type=int, default=20)
    demo.add_argument("--receiver-port", type=int, default=18099)
    demo.set_defaults(func=_demo)
    _verbose_everywhere(parser)
    return parser


def _verbose_everywhere(parser: argparse.ArgumentParser, top: bool = True) -> None:
    """``-v/--verbose`` on the command and on each of its subcommands (``cronstream lag -v`` and
    ``cronstream -v lag`` alike; a subcommand's own never overrides the top one's ``True``)."""
    parser.add_argument("-v", "--verbose", action="store_true",
                        default=False if top else argparse.SUPPRESS,
                        help="on a failure, the traceback too; and librdkafka's own log lines")
    for action in parser._actions:  # argparse lists its subparsers nowhere public
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                _verbose_everywhere(child, top=False)


def adopt_home_settings(args: argparse.Namespace) -> list[str]:
    """Set, in this process's environment, each Kafka client setting of the stack's home
    (``Stack.home_client_env``: a home made ``--secure``) the environment leaves unset, even
    empty: explicit settings win. Returns the names set (``config check`` says where they came
    from; a secret's value is never printed)."""
    from stack.local import Stack
    from streams.runtime import settings

    conf = settings.load()
    explicit = operate.explicit_bootstrap(args) or conf.given("CRONSTREAM_BOOTSTRAP")
    found = Stack(conf).home_client_env(
        explicit, conf.given("CRONSTREAM_KAFKA_SECURITY_PROTOCOL"),
        conf.given("CRONSTREAM_KAFKA_SASL_MECHANISM"))
    # into this process's environment: its later settings and the processes it starts see them
    return settings.export(found)


def reach(need: str, args: argparse.Namespace) -> None:
    """Reach what the command needs before it starts (``needs``), so a service that is down or
    refuses us ends it in one line with the cause, not in a traceback halfway."""
    import httpx
    import psycopg

    from streams.runtime import admin, settings

    conf = settings.load()
    if need == "kafka":
        admin.check_reachable(operate.bootstrap_of(args), KAFKA_WAIT_S, patient=False)
    elif need == "postgres":
        try:
            psycopg.connect(conf.pg_dsn, connect_timeout=10).close()
        except psycopg.OperationalError as exc:
            raise postgres_failure(conf.pg_params, exc) from exc
    elif need == "connect":
        url = (getattr(args, "connect_url", None) or conf.connect_url).rstrip("/")
        try:
            httpx.get(f"{url}/", timeout=10)
        except httpx.TransportError as exc:
            raise http_failure("Kafka Connect", url, exc, CONNECT_NEXT_STEP) from exc


def _label(args: argparse.Namespace) -> str:
    """``cronstream jobs list``: the command and its action, as a failure's line begins."""
    action = getattr(args, "tenant_command", None) or getattr(args, "action", None)
    return " ".join(["cronstream", args.command, *([action] if isinstance(action, str) else [])])


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for chatty in ("httpx", "botocore"):  # a line per request, or per credentials found
        logging.getLogger(chatty).setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    args.adopted = []
    with _client_logs(args.verbose, quiet=args.command not in SERVICES):
        try:
            if args.command not in ("stack", "demo"):  # those start the stack: it has its own
                args.adopted = adopt_home_settings(args)
            for need in getattr(args, "needs", ()):
                reach(need, args)
            return int(args.func(args))
        except (KeyboardInterrupt, SystemExit) as exc:
            if not (isinstance(exc, SystemExit) and isinstance(exc.code, str)):
                raise  # an exit code, or ^C: as they are
            return _said(args, exc)
        except Exception as exc:  # noqa: BLE001 - every failure ends in one line
            return _said(args, exc)


@contextlib.contextmanager
def _client_logs(verbose: bool, quiet: bool) -> Iterator[None]:
    """librdkafka's log lines while the command runs: every one with ``verbose`` (its clients'
    and the Kafka probe's, ``streams.runtime.admin``, at debug level); none when ``quiet`` (the
    command says what went wrong in its own line); else as the process logs them (a worker's).
    Put back after (a caller in the same process, a test, gets its defaults)."""
    from streams.runtime import kafka_config

    logger = logging.getLogger("librdkafka")
    if verbose:
        logger.setLevel(logging.DEBUG)
    elif quiet:
        kafka_config.quiet_client_logs()
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        kafka_config.quiet_client_logs(False)
        logger.setLevel(logging.NOTSET)


def _said(args: argparse.Namespace, exc: BaseException) -> int:
    """Print ``exc`` as the command's line(s) on stderr and return its exit code; one no rule
    knows is said as unexpected, its traceback only with ``--verbose``."""
    bootstrap = None
    with contextlib.suppress(SystemExit):  # settings that cannot be read: the failure says so
        bootstrap = operate.bootstrap_of(args)
    failure = explain(exc, bootstrap)
    if args.verbose:
        traceback.print_exception(exc)
    if failure is None:
        first = one_line(str(exc)) or "(no message)"
        failure = CliError(f"unexpected {type(exc).__name__}: {first} (--verbose shows where)",
                           FAILED)
    # settings' problems are one line each (settings.check_or_exit); anything else is one line
    lines = str(failure).splitlines() if failure.code == USAGE else [one_line(str(failure))]
    for line in lines:
        print(f"{_label(args)}: {line}", file=sys.stderr)
    return failure.code


if __name__ == "__main__":
    sys.exit(main())
