"""``podres-exporter snapshot``: one reconcile of a live node or a fixture directory."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from exporter.errors import UserError
from exporter.flags import add_flag
from exporter.options import SourcesOptions, add_output_flag

if TYPE_CHECKING:
    from reconciler.ledger import Ledger

HELP = "reconcile a node once and print the ledger (table or JSON)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--from", dest="from_dir", default=None, metavar="DIR",
             help="read a fixture directory (list.json, allocatable.json, pods.json, "
             "configz.json, topology.json) instead of a live node")
    add_output_flag(parser, "output format; json is the podres.ledger/v1 object")
    SourcesOptions.add_flags(parser)


def run(args: argparse.Namespace) -> int:
    ledger: Ledger
    if args.from_dir:
        ledger = ledger_from_fixture(args.from_dir,
                                     node_name=SourcesOptions.from_args(args).node_name)
    else:
        ledger = asyncio.run(_live(args))
    if args.output == "json":
        json.dump(ledger.to_json(), sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        from exporter.render import render_ledger

        sys.stdout.write(render_ledger(ledger))
    return 0


def ledger_from_fixture(directory: str, node_name: str = "") -> Ledger:
    from exporter.assemble import assemble, parse_configz, parse_pod_list
    from exporter.sources.fixture import load_fixture_dir
    from exporter.sources.kubelet import parse_feature_metrics
    from reconciler.kube import SpecError
    from reconciler.reconcile import reconcile

    fixture = load_fixture_dir(directory)
    k = fixture.kubelet
    try:
        specs = parse_pod_list(k.pod_list)
    except SpecError as exc:
        raise UserError(f"{Path(directory, 'pods.json')}: {exc}") from None
    try:
        config = parse_configz(k.configz)
    except SpecError as exc:
        raise UserError(f"{Path(directory, 'configz.json')}: {exc}") from None
    # What a live read learns from /metrics (recorded as metrics.txt), so that a recorded
    # node gives the same ledger as the live one.
    info: dict[str, str] = {}
    if k.metrics is not None:
        gates = parse_feature_metrics(k.metrics)
        if "PodLevelResourceManagers" in gates:
            info["feature_gate_metric"] = str(gates["PodLevelResourceManagers"])
    return reconcile(assemble(k.list_response, allocatable=k.allocatable, pod_specs=specs,
                              config=config, topology=fixture.topology, node_name=node_name,
                              kubelet_info=info))


async def _live(args: argparse.Namespace) -> Ledger:
    from exporter.commands._sources import source_options
    from exporter.reader import NodeReader

    reader = NodeReader(source_options(args))
    try:
        reading = await reader.read()
    finally:
        await reader.close()
    for message in reading.errors.values():
        print(f"podres-exporter snapshot: warning: {message}", file=sys.stderr)
    return reading.ledger

