"""``podres-exporter record DIR``: capture a live node into a fixture directory.

A fixture is read as a whole, so it is written as a whole: into a new sibling directory,
which then takes DIR's place. A directory that already holds files is refused unless
``--force``: writing some files over an older fixture would leave a mix of two nodes
(a file this capture lacks, such as ``pods.json``, would survive from the old one)."""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from exporter.errors import UserError
from exporter.options import KernelSourcesOptions, SourcesOptions

if TYPE_CHECKING:
    from exporter.rawnode import RawNode

HELP = "capture a live node into a fixture directory (for bug reports and tests)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", metavar="DIR", help="where to write the fixture files")
    parser.add_argument("--force", action="store_true",
                        help="replace DIR when it is not empty (its files are removed)")
    SourcesOptions.add_flags(parser)
    KernelSourcesOptions.add_flags(parser)


def run(args: argparse.Namespace) -> int:
    _check_target(Path(args.directory), force=args.force)
    return asyncio.run(_record(args))


def _check_target(target: Path, *, force: bool) -> None:
    """Refuse, before the node is read, a DIR that cannot be (or may not be) replaced."""
    if not target.exists() and not target.is_symlink():
        return
    if target.is_symlink():
        raise UserError(f"{target}: is a symbolic link; give the directory itself")
    if not target.is_dir():
        raise UserError(f"{target}: exists and is not a directory")
    try:
        empty = next(target.iterdir(), None) is None
    except OSError as exc:
        raise UserError(f"cannot read {target}: {exc.strerror or exc}") from None
    if not empty and not force:
        raise UserError(f"{target}: directory is not empty; record writes a whole fixture: "
                        "choose a new directory, or pass --force to replace it")


async def _record(args: argparse.Namespace) -> int:
    from exporter.commands._sources import source_options
    from exporter.rawnode import body_bytes
    from exporter.reader import NodeReader

    reader = NodeReader(source_options(args))
    try:
        reading = await reader.read()
    finally:
        await reader.close()
    for message in reading.errors.values():
        print(f"podres-exporter record: warning: {message}", file=sys.stderr)
    target = Path(args.directory)
    try:
        names = _write_whole(target, reading.raw, SourcesOptions.from_args(args).node_name)
    except OSError as exc:
        raise UserError(f"cannot write {args.directory}: {exc.strerror or exc}") from None
    for name in names:
        print(target / name)
    for path in _record_kernel(args, body_bytes(reading.raw.pods), reading.raw.configz):
        print(path)
    return 0


def _record_kernel(args: argparse.Namespace, pods: bytes | None,
                   configz: bytes | None) -> list[str]:
    """``cgroup/`` and ``proc_stat`` (docs/kernel.md), beside the kubelet's answers."""
    import json

    from exporter.kernel import KernelOptions, capture_kernel_files

    try:
        pod_list = json.loads(pods) if pods is not None else None
    except ValueError:
        pod_list = None  # reported with the poll's warnings
    try:
        kubelet_config = json.loads(configz) if configz is not None else None
    except ValueError:
        kubelet_config = None
    options = KernelOptions.from_flags(KernelSourcesOptions.from_args(args))
    try:
        written, warnings = capture_kernel_files(options, pod_list, args.directory,
                                                 kubelet_config)
    except OSError as exc:
        raise UserError(f"cannot write {args.directory}: {exc.strerror or exc}") from None
    for message in warnings:
        print(f"podres-exporter record: warning: {message}", file=sys.stderr)
    return written


def _write_whole(target: Path, raw: RawNode, node_name: str) -> list[str]:
    """Write the fixture into a sibling directory, then put it in ``target``'s place (the
    old directory is removed only once the new one is complete); the names written."""
    from exporter.sources.fixture import write_fixture_dir

    parent = target.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = _sibling(target, "new")
    staging.mkdir()
    try:
        names = [path.name for path in write_fixture_dir(staging, raw, node_name)]
        if target.exists():
            old = _sibling(target, "old")
            os.replace(target, old)
            os.replace(staging, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return names


def _sibling(target: Path, role: str) -> Path:
    """A hidden name next to ``target`` that no other run uses."""
    return target.absolute().parent / f".{target.name}.{role}-{secrets.token_hex(6)}"
