"""``podres-exporter history``: query and prune the history store.

``history events --since 1h``, ``history at TIME``, ``history prune``; each prints a table or
``--output json``."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any

from exporter.errors import UserError
from exporter.flags import add_flag, parse_duration, positive_int
from exporter.options import HistoryOptions, add_output_flag

HELP = "query the history store (events, what every container held at a time) and prune it"
# `history at` that finds no container: the query worked but there is no answer, as grep's 1
# (2 is a usage or database error in every command; docs/history.md#history-command).
EMPTY_EXIT = 1


def _common(parser: argparse.ArgumentParser, *history: str) -> None:
    HistoryOptions.add_flags(parser, only=("url", *history))
    add_output_flag(parser)
    add_flag(parser, "--node", default=None, metavar="NAME", help="only this node")


_SUBCOMMANDS = {
    "events": ("changes over the last hour, or since a duration or time: assignments "
               "opened and released, anomalies raised and resolved, gaps in the record",
               "Print what changed between --since and --until, oldest first. Both take a "
               "duration back from now (30m, 2h, 7d, 1h30m) or a time (RFC 3339, unix "
               "seconds): --since 30m is the last half hour."),
    "at": ("what every container held at TIME",
           "Print every container's CPUs, memory and NUMA nodes as they were at TIME, with "
           "a warning when TIME falls in a gap of the record."),
    "prune": ("delete history older than the retention",
              "Delete assignments, anomalies, gaps and summaries that ended before the "
              "cutoff (now minus --history.retention, or --before). serve prunes by itself "
              "every --history.prune-interval; this is for a one-off clean-up."),
}


def _subparser(sub: Any, name: str, *history: str) -> argparse.ArgumentParser:
    """A subcommand with its description and the flags every subcommand takes, plus the
    ``history`` options named."""
    summary, detail = _SUBCOMMANDS[name]
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=summary, description=f"{summary[0].upper()}{summary[1:]}. {detail}")
    _common(parser, *history)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="history_command", metavar="SUBCOMMAND")
    sub.required = True

    events = _subparser(sub, "events")
    events.add_argument("--since", default="1h", metavar="DURATION|TIME",
                        help="a duration back from now (1h, 30m) or a time (RFC 3339, "
                        "unix seconds) (default: %(default)s)")
    events.add_argument("--until", default=None, metavar="DURATION|TIME",
                        help="end: a duration back from now or a time (default: now)")
    events.add_argument("--limit", type=positive_int, default=10000, metavar="N",
                        help="at most this many events (default: %(default)s)")

    at = _subparser(sub, "at")
    at.add_argument("time", metavar="DURATION|TIME",
                    help="a duration back from now (5m, 2h), RFC 3339 "
                    "(2026-11-30T09:15:00Z), unix seconds, or 'now'; exits "
                    f"{EMPTY_EXIT} when nothing was recorded at that time")

    prune = _subparser(sub, "prune", "retention")
    add_flag(prune, "--before", default=None, metavar="TIME",
             help="delete what ended before TIME instead (overrides retention)")


def _time(text: str, flag: str) -> datetime:
    from exporter.history.timeutil import TimeError, parse_time

    try:
        return parse_time(text)
    except TimeError as exc:
        raise UserError(f"{flag}: {exc}") from None


def _since(text: str, flag: str = "--since") -> datetime:
    """A duration back from now (``5m``) or a time, as ``events --since`` and ``at``
    take them."""
    from exporter.history.timeutil import TimeError, ago

    try:
        seconds = parse_duration(text)
    except argparse.ArgumentTypeError:
        return _time(text, flag)
    try:
        return ago(seconds)
    except TimeError as exc:
        raise UserError(f"{flag}: {exc}") from None


def run(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from exporter.history import open_store
    from exporter.history.store import describe_error

    command = args.history_command
    store = open_store(HistoryOptions.from_args(args).url,
                       mode="maintenance" if command == "prune" else "readonly")
    try:
        if command == "events":
            return _events(store, args)
        if command == "at":
            return _at(store, args)
        return _prune(store, args)
    except SQLAlchemyError as exc:  # the database went away after it was opened
        raise UserError(f"history database {store.url}: {describe_error(exc)}") from None
    finally:
        store.close()


def _emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True))
             .rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
              for row in rows]
    return "\n".join(lines) + "\n"


def _printable(text: Any) -> str:
    """Names come from the kubelet: never let control characters reach the terminal."""
    s = "" if text is None else str(text)
    return "".join(ch if ch.isprintable() else "?" for ch in s)


def _events(store: Any, args: argparse.Namespace) -> int:
    from exporter.history import queries as q
    from exporter.history.timeutil import format_time
    from exporter.render import human_bytes

    start = _since(args.since)
    end = _since(args.until, "--until") if args.until else None
    items = q.events(store, start, end, node=args.node, limit=args.limit)
    if args.output == "json":
        _emit_json({"since": format_time(start), "until": format_time(end),
                    "events": items})
        return 0
    rows = []
    for e in items:
        if e["event"] == "gap":
            what = f"until {e['until']}, {e['dropped_writes']} writes dropped"
            subject = ""
        elif e["event"].startswith("anomaly"):
            what = f"{e['kind']}: {e['detail']}"
            subject = "/".join(x for x in (e["namespace"], e["pod"], e["container"]) if x)
        else:
            what = f"{e['assignment']} cpus={e['cpus'] or '-'} " \
                f"mem={human_bytes(e['memory_bytes'])}"
            subject = f"{e['namespace']}/{e['pod']}/{e['container']}"
        rows.append([_printable(x) for x in (e["time"], e["node"], e["event"], subject, what)])
    sys.stdout.write(table(["time", "node", "event", "subject", "detail"], rows))
    return 0


def _at(store: Any, args: argparse.Namespace) -> int:
    from exporter.history import queries as q
    from exporter.history.timeutil import format_time
    from exporter.render import human_bytes

    when = _since(args.time, "TIME")
    items = q.assignments_at(store, when, node=args.node)
    gap_items = q.gaps(store, node=args.node, window=q.Window(at=when), limit=1000).items
    items.sort(key=lambda i: (i["node"], i["namespace"], i["pod"], i["container"]))
    if not items:
        _say_empty(store, when, args.node)
    if args.output == "json":
        _emit_json({"at": format_time(when), "containers": items, "gaps": gap_items})
        return 0 if items else EMPTY_EXIT
    for g in gap_items:
        print(f"warning: {_printable(g['node'])} has a history gap from {g['from']} to "
              f"{g['to']} ({g['dropped_writes']} writes dropped): this time is approximate",
              file=sys.stderr)
    rows = [[_printable(x) for x in (
        i["node"], i["namespace"], i["pod"], i["container"], i["assignment"],
        i["cpus"] or "-", str(i["cpu_count"]), human_bytes(i["memory_bytes"]),
        ",".join(map(str, i["numa_nodes"])) or "-", i["valid_from"])] for i in items]
    sys.stdout.write(table(["node", "namespace", "pod", "container", "assignment", "cpus",
                            "count", "memory", "numa", "since"], rows))
    return 0 if items else EMPTY_EXIT


def _say_empty(store: Any, when: datetime, node: str | None) -> None:
    """An empty answer says why, on stderr: what the record covers."""
    from exporter.history import queries as q
    from exporter.history.timeutil import format_time

    known = [n for n in q.list_nodes(store, limit=1000).items
             if node is None or n["name"] == node]
    where = f"node {_printable(node)}" if node else "any node"
    if not known:
        span = "the history holds no node" + (f" named {_printable(node)}" if node else "")
    else:
        first = min(n["first_seen"] for n in known)
        last = max(n["last_seen"] for n in known)
        span = f"the record runs from {first} to {last}"
    print(f"podres-exporter history at: nothing recorded for {where} at "
          f"{format_time(when)}: {span}", file=sys.stderr)


def _prune(store: Any, args: argparse.Namespace) -> int:
    from exporter.history.timeutil import TimeError, ago, format_time

    try:
        before = _time(args.before, "--before") if args.before else \
            ago(HistoryOptions.from_args(args).retention)
    except TimeError as exc:
        raise UserError(f"--history.retention: {exc}") from None
    result = store.prune(before, node=args.node)
    if args.output == "json":
        _emit_json({"before": format_time(before), "deleted": result.to_json()})
    else:
        d = result.to_json()
        print(f"pruned history before {format_time(before)}: " +
              ", ".join(f"{v} {k}" for k, v in d.items()))
    return 0
