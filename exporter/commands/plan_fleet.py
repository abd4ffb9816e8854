"""``plan --fleet``: the manifest's pods placed on every node of a history database as each
node was last recorded, the nodes ranked by fit (docs/plan.md#fleet)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from exporter.errors import UserError
from exporter.flags import add_flag, duration, format_duration
from exporter.history.fleetplan import DEFAULT_STALE_AFTER
from exporter.options import HistoryOptions, ModelOptions

# Flags of plan that describe one node, which the fleet's recorded states replace.
_NODE_FLAGS = (("node", "--node"), ("from_dir", "--from"), ("suggest", "--suggest"))


def add_flags(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--fleet.stale-after", dest="stale_after", metavar="DURATION",
             type=duration(1.0, 365 * 86400.0), default=DEFAULT_STALE_AFTER,
             help="with --fleet: a node whose exporter last wrote longer ago than this is "
             "stale, marked and ranked after the fresh nodes that fit (a running exporter "
             "writes at least once per --history.summary-interval, 1m by default) "
             f"(default: {format_duration(DEFAULT_STALE_AFTER)})")


def check_args(args: argparse.Namespace, options: ModelOptions) -> None:
    for dest, flag in _NODE_FLAGS:
        value = getattr(args, dest, None)
        if value is not None and value is not False:
            raise UserError(f"--fleet places the pods on every recorded node: {flag} does "
                            "not apply")
    if options.shape or options.topology:
        raise UserError("--fleet models each node from its recorded topology: "
                        "--topology and --topology.shape do not apply")
    if options.devices:
        raise UserError("--fleet models each node's devices from the history's device "
                        "records: --devices does not apply")
    if options.distances:
        raise UserError("--fleet models each node from its recorded topology: "
                        "--topology.distances does not apply")
    if options.memory_per_numa is not None:
        raise UserError("--fleet models each node's memory as recorded: --memory-per-numa "
                        "does not apply")


def run_fleet(args: argparse.Namespace, templates: Sequence[Any], fallback: Any) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from exporter.history import open_store
    from exporter.history.fleetread import answer_json, plan_on_fleet
    from exporter.history.store import describe_error

    store = open_store(HistoryOptions.from_args(args).url, mode="readonly")
    try:
        answer = answer_json(plan_on_fleet(store, templates, fallback,
                                           stale_after=args.stale_after))
    except SQLAlchemyError as exc:  # the database went away after it was opened
        raise UserError(f"history database {store.url}: {describe_error(exc)}") from None
    finally:
        store.close()
    if args.output == "json":
        print(json.dumps(answer, indent=2))
    else:
        print(render_table(answer))
    return 0


def _fits(n: dict[str, Any]) -> str:
    if n["admitted"] is None:
        return "-"
    if n["excluded"]:
        return "out"
    return "yes" if n["admitted"] else "no"


def _age(seconds: int) -> str:
    """``42s``, ``7m``, ``3h``, ``2d``: the age of a node's last write, whole units."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def render_table(answer: dict[str, Any]) -> str:
    head = ["RANK", "NODE", "FITS", "NUMA", "CPUS-LEFT", "CPUS", "CONFIG", "LAST-SEEN",
            "RECORDED", "REASON"]
    rows = [head]
    for n in answer["nodes"]:
        cpus = ";".join(p["cpus"] or "-" for p in n["pods"]) if n["admitted"] else "-"
        seen = f"{_age(n['age_seconds'])} ago" + (" STALE" if n["stale"] else "")
        rows.append([str(n["rank"]), n["node"], _fits(n),
                     ",".join(map(str, n["numa_nodes"])) or "-",
                     "-" if n["cpus_left"] is None else str(n["cpus_left"]), cpus or "-",
                     n["config"] or "-", seen, n["recorded_at"] or "-",
                     n["cause"] or n["reason"] or ""])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    stale = format_duration(answer["stale_after_seconds"])
    return "\n".join([*lines, "", f"order: {answer['order']}",
                      f"stale: last seen more than {stale} ago (--fleet.stale-after); its "
                      "state may be out of date"])
