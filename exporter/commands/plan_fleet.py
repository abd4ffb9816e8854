"""``plan --fleet``: the manifest's pods placed on every node of a history database as each
node was last recorded, the nodes ranked by fit (docs/plan.md#fleet)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from exporter.errors import UserError
from exporter.options import HistoryOptions

# Flags of plan that describe one node, which the fleet's recorded states replace.
_NODE_FLAGS = (("node", "--node"), ("from_dir", "--from"), ("suggest", "--suggest"))


def check_args(args: argparse.Namespace, shape: str | None, topology: str | None) -> None:
    for dest, flag in _NODE_FLAGS:
        value = getattr(args, dest, None)
        if value is not None and value is not False:
            raise UserError(f"--fleet places the pods on every recorded node: {flag} does "
                            "not apply")
    if shape or topology:
        raise UserError("--fleet models each node from its recorded topology: "
                        "--topology and --topology.shape do not apply")


def run_fleet(args: argparse.Namespace, templates: Sequence[Any], fallback: Any) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from exporter.history import open_store
    from exporter.history.fleetread import answer_json, plan_on_fleet
    from exporter.history.store import describe_error

    store = open_store(HistoryOptions.from_args(args).url, mode="readonly")
    try:
        answer = answer_json(plan_on_fleet(store, templates, fallback))
    except SQLAlchemyError as exc:  # the database went away after it was opened
        raise UserError(f"history database {store.url}: {describe_error(exc)}") from None
    finally:
        store.close()
    if args.output == "json":
        print(json.dumps(answer, indent=2))
    else:
        print(render_table(answer))
    return 0


def render_table(answer: dict[str, Any]) -> str:
    head = ["RANK", "NODE", "FITS", "NUMA", "CPUS-LEFT", "CPUS", "CONFIG", "RECORDED",
            "REASON"]
    rows = [head]
    for n in answer["nodes"]:
        fits = "-" if n["admitted"] is None else "yes" if n["admitted"] else "no"
        cpus = ";".join(p["cpus"] or "-" for p in n["pods"]) if n["admitted"] else "-"
        rows.append([str(n["rank"]), n["node"], fits,
                     ",".join(map(str, n["numa_nodes"])) or "-",
                     "-" if n["cpus_left"] is None else str(n["cpus_left"]), cpus or "-",
                     n["config"] or "-", n["recorded_at"] or "-", n["reason"] or ""])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    return "\n".join([*lines, "", f"order: {answer['order']}"])
