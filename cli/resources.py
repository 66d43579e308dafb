"""``cronstream jobs|campaigns|suppressions``: the tenant's API, from a shell or a script.

Each command is one API call (or a paged walk); the API validates, so a bad field is reported
exactly as the API names it. ``--json`` prints the API's JSON for scripts.
"""

from __future__ import annotations

import argparse
import io
import json
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from cli import progress
from cli.client import Client, client, emit, load_documents
from cli.failures import FAILED, OK, USAGE, CliError

RUNS_LIMIT = 20  # jobs runs: the newest 20 unless --limit says otherwise


def _client(args: argparse.Namespace) -> Client:
    return client(args.api_url, args.api_key)


def _import_body(path_text: str) -> tuple[str, Iterator[bytes]]:
    """What ``jobs import`` streams: an NDJSON or CSV file as it is, a YAML or JSON file (one job
    or a list) as NDJSON, a line per job in the file's order; with a progress line."""
    path = Path(path_text)
    if path.suffix in (".ndjson", ".jsonl", ".csv"):
        if not path.is_file():
            raise CliError(f"--file {path_text}: no such file", USAGE)
        kind = "text/csv" if path.suffix == ".csv" else "application/x-ndjson"
        return kind, progress.file_chunks(path)
    lines = "".join(json.dumps(doc) + "\n" for doc in load_documents(path_text)).encode()
    return "application/x-ndjson", progress.upload_chunks(io.BytesIO(lines), len(lines),
                                                          path.name)


def _job_line(job: dict[str, Any]) -> str:
    sched = job["schedule"]
    when = sched.get("cron") or sched.get("at") or f"every {sched.get('every_s')}s"
    state = job.get("state") or ("paused" if job.get("paused") else "active")
    name = f"  {job['name']!r}" if job.get("name") else ""
    labels = job.get("labels") or {}
    tags = "  [" + ", ".join(f"{k}:{v}" for k, v in sorted(labels.items())) + "]" if labels else ""
    return (f"{job['id']}  {state:<9}{name}  {when} ({sched.get('timezone')})  "
            f"→ {job['target']['type']}{tags}")


def _once_each(jobs: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Jobs until one comes again. A list by next run (``--state``) moves with the clock: a job
    whose next run passes while the pages are read sorts after the cursor again, and an
    every-minute tenant's pages would go round for ever."""
    seen: set[str] = set()
    for job in jobs:
        if job["id"] in seen:
            return
        seen.add(job["id"])
        yield job


def jobs(args: argparse.Namespace) -> int:
    api = _client(args)
    if args.action == "create":
        created = []
        for doc in load_documents(args.file):
            headers = {"Idempotency-Key": doc.pop("idempotency_key")} if "idempotency_key" in doc else {}
            created.append(api.call("POST", "/v1/jobs", json=doc, headers=headers))
        emit(created, args.json, "\n".join(f"created {_job_line(j)}" for j in created))
    elif args.action == "import" and args.delete_label:
        result = api.call("POST", "/v1/job-imports", json={"delete_label": args.delete_label},
                          timeout=None)
        emit(result, args.json, f"deleting {result['deleted_by_label']} jobs labelled "
                                f"{args.delete_label} (gone as the workers apply it)")
    elif args.action == "import":
        kind, body = _import_body(args.file)
        try:
            result = api.call("POST", "/v1/job-imports/stream", content=body,
                              headers={"Content-Type": kind}, timeout=None)
        except CliError as exc:  # the lines are the file's (a YAML or JSON list: its items)
            raise CliError(f"{args.file}: nothing imported: {exc}", exc.code) from exc
        emit(result, args.json, f"imported {result['created']} jobs, deleted {result['deleted']} "
                                f"(live as the workers apply them)")
    elif args.action == "list":
        # --limit: that many jobs (pages of at most 500), not every page of a 20,000-job tenant
        params: dict[str, Any] = {"label": args.label} if args.label else {}
        params.update({k: v for k, v in (("state", args.state), ("name", args.name)) if v})
        if args.limit is not None:
            params["limit"] = max(1, min(args.limit, 500))
        items = list(islice(_once_each(api.pages("/v1/jobs", **params)), args.limit))
        emit(items, args.json, "\n".join(_job_line(j) for j in items) or "no jobs")
    elif args.action == "runs":
        limit = RUNS_LIMIT if args.limit is None else args.limit
        runs = api.call("GET", f"/v1/jobs/{_id(args)}/runs", params={"limit": limit})["items"]
        emit(runs, args.json, "\n".join(
            f"{r['nominal_time']}  {r['decision']:<14} {r.get('outcome') or '-':<10} "
            f"{r.get('fire_id')}" for r in runs) or "no runs yet")
    elif args.action in ("pause", "resume"):
        job = api.call("POST", f"/v1/jobs/{_id(args)}/{args.action}")
        emit(job, args.json, _job_line(job))
    elif args.action == "trigger":
        accepted = api.call("POST", f"/v1/jobs/{_id(args)}/trigger")
        emit(accepted, args.json, f"triggered {_id(args)}: fire id {accepted['fire_id']}")
    elif args.action == "delete":
        api.call("DELETE", f"/v1/jobs/{_id(args)}")
        emit({"deleted": _id(args)}, args.json, f"deleted {_id(args)}")
    else:  # get
        emit(api.call("GET", f"/v1/jobs/{_id(args)}"), args.json)
    return 0


def campaigns(args: argparse.Namespace) -> int:
    api = _client(args)
    if args.action == "create":
        docs = load_documents(args.file)
        if len(docs) != 1:
            raise CliError(f"--file {args.file}: one campaign per file, found {len(docs)}", USAGE)
        created = api.call("POST", "/v1/campaigns", json=docs[0])
        emit(created, args.json, f"created campaign {created['id']} ({created['status']})")
    elif args.action == "upload":
        path = Path(args.file)
        if not path.is_file():
            raise CliError(f"--file {args.file}: no such file", USAGE)
        kind = "application/x-ndjson" if path.suffix in (".ndjson", ".jsonl") else "text/csv"
        result = api.call("PUT", f"/v1/campaigns/{_id(args)}/recipients",
                          content=progress.file_chunks(path), headers={"Content-Type": kind},
                          timeout=None)
        emit(result, args.json, f"accepted {result['recipients']} recipients "
             f"({result['duplicates']} duplicates dropped), {result['bad_rows']} bad rows" + "".join(
                 f"\n  line {r['line']}: {r['reason']}" for r in result["bad_rows_listed"][:20]))
    elif args.action == "watch":
        view = progress.watch(lambda: api.call("GET", f"/v1/campaigns/{_id(args)}"),
                              args.every_s, args.timeout_s)
        if args.json:
            emit(view, True)
        return OK if progress.finished(view) else FAILED
    elif args.action in ("schedule", "pause", "resume", "cancel"):
        view = api.call("POST", f"/v1/campaigns/{_id(args)}/{args.action}")
        emit(view, args.json, f"campaign {view['id']}: {view['status']}")
    else:  # get
        view = api.call("GET", f"/v1/campaigns/{_id(args)}")
        emit(view, args.json, progress.campaign_line(view))
    return 0


def suppressions(args: argparse.Namespace) -> int:
    api = _client(args)
    if args.action == "add":
        result = api.call("POST", "/v1/suppressions",
                          json={"email": args.email, "reason": args.reason})
        emit(result, args.json, f"suppressed {result['email']}")
    else:
        api.call("DELETE", f"/v1/suppressions/{args.email}")
        emit({"email": args.email, "suppressed": False}, args.json, f"removed {args.email}")
    return 0


def _id(args: argparse.Namespace) -> str:
    if not args.id:
        raise CliError(f"{args.action}: an id is required", USAGE)
    return str(args.id)


def add_parsers(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--api-url", default=None, help="default: the local stack's API")
    common.add_argument("--api-key", default=None, help="default: $CRONSTREAM_API_KEY")
    common.add_argument("--json", action="store_true", help="print JSON for scripts")

    def resource(name: str, actions: list[str], id_help: str, file_help: str) -> Any:
        p = sub.add_parser(name, parents=[common], help=", ".join(actions))
        p.add_argument("action", choices=actions)
        p.add_argument("id", nargs="?", help=id_help)
        p.add_argument("-f", "--file", default="-", help=file_help)
        return p

    p = resource("jobs", ["create", "import", "list", "get", "pause", "resume", "trigger", "runs",
                          "delete"], "job id (all but create/import/list)",
                 "create: YAML or JSON, one job or a list; import: that, or NDJSON (.ndjson, "
                 ".jsonl) or CSV (.csv), streamed: a job, or a delete, per line")
    p.add_argument("--limit", type=int, default=None,
                   help=f"list: at most this many jobs (default all); runs: how many, newest "
                        f"first (default {RUNS_LIMIT})")
    p.add_argument("--label", action="append", default=[], metavar="KEY[:VALUE]",
                   help="list: only jobs with this label (repeat: all of them)")
    p.add_argument("--state", choices=["active", "paused", "completed"], default=None,
                   help="list: only jobs in this state (active, paused: soonest next run first)")
    p.add_argument("--name", default=None, metavar="PREFIX",
                   help="list: only jobs whose name starts with this, in name order")
    p.add_argument("--delete-label", default=None, metavar="KEY[:VALUE]",
                   help="import: delete every job with this label (no file)")
    p.set_defaults(func=jobs)

    p = resource("campaigns", ["create", "upload", "schedule", "watch", "get", "pause", "resume",
                               "cancel"], "campaign id (all but create)",
                 "create: YAML/JSON; upload: CSV or NDJSON")
    p.add_argument("--every-s", type=float, default=1.0, help="watch: refresh interval")
    p.add_argument("--timeout-s", type=float, default=None, help="watch: give up after (exit 1)")
    p.set_defaults(func=campaigns)

    p = sub.add_parser("suppressions", parents=[common], help="add or remove an opt-out")
    p.add_argument("action", choices=["add", "remove"])
    p.add_argument("email")
    p.add_argument("--reason", default="requested")
    p.set_defaults(func=suppressions)
