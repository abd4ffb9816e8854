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
    from exporter.reader import Reading
    from reconciler.ledger import Ledger

HELP = "reconcile a node once and print the ledger (table or JSON)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--from", dest="from_dir", default=None, metavar="DIR",
             help="read a fixture directory (list.json, allocatable.json, pods.json, "
             "configz.json, topology.json) instead of a live node")
    add_output_flag(parser, "output format; json is the podres.ledger/v1 object (with "
                    "enforced_cpus when the fixture has a cgroup/ tree)")
    SourcesOptions.add_flags(parser)


def run(args: argparse.Namespace) -> int:
    ledger: Ledger
    if args.from_dir:
        from exporter.commands._sources import refuse_ignored_with_from

        refuse_ignored_with_from(args, keep=("node_name",))
        ledger = ledger_from_fixture(args.from_dir, node_name=_fixture_node(args))
    else:
        ledger = asyncio.run(read_live(args, "snapshot")).ledger
    warn_divergences(ledger, "snapshot")
    if args.output == "json":
        body = ledger.to_json()
        if args.from_dir:
            _add_fixture_enforced(body, args.from_dir)
        json.dump(body, sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        from exporter.render import render_ledger

        sys.stdout.write(render_ledger(ledger))
    return 0


def _fixture_node(args: argparse.Namespace) -> str:
    """``--node-name`` on the command line, else the name the fixture was recorded with,
    else the usual default ($NODE_NAME, the host name): a fixture is another node's."""
    from exporter.sources.fixture import fixture_node_name

    if "--node-name" not in getattr(args, "_given", ()):
        recorded = fixture_node_name(args.from_dir)
        if recorded:
            return recorded
    return str(SourcesOptions.from_args(args).node_name)


def _add_fixture_enforced(body: dict[str, object], directory: str) -> None:
    """A fixture with a ``cgroup/`` tree shows what the kernel enforced beside the ledger's
    sets (``enforced_cpus``); one reading has no persistence window, so no drift is
    judged."""
    from exporter.kernel import add_enforced, fixture_enforced
    from exporter.sources.fixture import load_fixture_dir

    kubelet = load_fixture_dir(directory).kubelet
    enforced = fixture_enforced(directory, kubelet.pod_list, kubelet.configz)
    if enforced is not None:
        add_enforced(body, enforced)


def ledger_from_fixture(directory: str, node_name: str = "") -> Ledger:
    """The ledger of a fixture directory, through the same raw → snapshot path as a live
    read; a malformed file is an error naming it (a fixture has no source to degrade)."""
    from exporter.assemble import snapshot_from_raw
    from exporter.sources.fixture import FILE_OF, load_fixture_dir
    from reconciler.reconcile import reconcile

    raw = load_fixture_dir(directory)
    assembled = snapshot_from_raw(raw, node_name)
    for key, exc in assembled.errors.items():
        where = Path(directory, FILE_OF.get(key, ""))
        message = str(exc).removeprefix(f"{exc.source} {exc.operation}: ")
        raise UserError(f"{where}: {message}")
    return reconcile(assembled.snapshot)


def warn_divergences(ledger: Ledger, command: str) -> None:
    """Where the kubelet sees the machine otherwise than the kernel, the ledger follows the
    kubelet: say so (docs/design.md#topology)."""
    for d in ledger.topology_divergences or ():
        print(f"podres-exporter {command}: warning: topology {d.kind}: {d.detail}",
              file=sys.stderr)


async def read_live(args: argparse.Namespace, command: str) -> Reading:
    """One reading of the live node of the sources flags; what failed is a warning."""
    from exporter.commands._sources import source_options
    from exporter.reader import NodeReader

    reader = NodeReader(source_options(args))
    try:
        reading = await reader.read()
    finally:
        await reader.close()
    for message in reading.errors.values():
        print(f"podres-exporter {command}: warning: {message}", file=sys.stderr)
    return reading
