"""``podres-exporter record DIR``: capture a live node into a fixture directory."""

from __future__ import annotations

import argparse
import asyncio
import sys

from exporter.errors import UserError
from exporter.options import KernelSourcesOptions, SourcesOptions

HELP = "capture a live node into a fixture directory (for bug reports and tests)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", metavar="DIR", help="where to write the fixture files")
    SourcesOptions.add_flags(parser)
    KernelSourcesOptions.add_flags(parser)


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_record(args))


async def _record(args: argparse.Namespace) -> int:
    from exporter.commands._sources import source_options
    from exporter.reader import NodeReader
    from exporter.sources.fixture import write_fixture_dir

    reader = NodeReader(source_options(args))
    try:
        reading = await reader.read()
    finally:
        await reader.close()
    for message in reading.errors.values():
        print(f"podres-exporter record: warning: {message}", file=sys.stderr)
    try:
        written = write_fixture_dir(args.directory, reading.raw)
    except OSError as exc:
        raise UserError(f"cannot write {args.directory}: {exc.strerror or exc}") from None
    for path in [*written, *_record_kernel(args, reading.raw.pods)]:
        print(path)
    return 0


def _record_kernel(args: argparse.Namespace, pods: bytes | None) -> list[str]:
    """``cgroup/`` and ``proc_stat`` (docs/kernel.md), beside the kubelet's answers."""
    import json

    from exporter.kernel import KernelOptions, capture_kernel_files

    try:
        pod_list = json.loads(pods) if pods is not None else None
    except ValueError:
        pod_list = None  # reported with the poll's warnings
    options = KernelOptions.from_flags(KernelSourcesOptions.from_args(args))
    try:
        written, warnings = capture_kernel_files(options, pod_list, args.directory)
    except OSError as exc:
        raise UserError(f"cannot write {args.directory}: {exc.strerror or exc}") from None
    for message in warnings:
        print(f"podres-exporter record: warning: {message}", file=sys.stderr)
    return written
