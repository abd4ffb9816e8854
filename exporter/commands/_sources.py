"""The reader's options from the sources flag group (``snapshot``, ``record``, ``doctor``,
``serve``): ``exporter.reader.SourceOptions`` stays the reader's own type."""

from __future__ import annotations

import argparse

from exporter.options import SourcesOptions
from exporter.reader import SourceOptions


def source_options(args: argparse.Namespace | SourcesOptions) -> SourceOptions:
    """What ``NodeReader`` needs, from parsed arguments or an options object."""
    opts = args if isinstance(args, SourcesOptions) else SourcesOptions.from_args(args)
    return SourceOptions(
        socket=opts.socket,
        timeout=opts.timeout,
        max_receive_bytes=opts.max_receive_bytes,
        kubelet_url=opts.kubelet_url,
        token_file=opts.token_file,
        ca_file=opts.ca_file,
        insecure_skip_verify=opts.insecure_skip_verify,
        sysfs=None if opts.topology else opts.sysfs,
        topology_file=opts.topology,
        kubelet_root=opts.root_dir,
        node_name=opts.node_name,
        metrics_interval=opts.metrics_interval,
        pods_interval=opts.pods_interval,
        reprobe_interval=opts.reprobe_interval,
    )


def refuse_ignored_with_from(args: argparse.Namespace, *, keep: tuple[str, ...] = ()) -> None:
    """``--from DIR`` reads a fixture directory: a sources flag written beside it would be
    silently ignored, so it is refused by name (the environment's ``PODRES_*`` settings are
    not: in the exporter's pod they are always set). ``keep`` names the fields the command
    still reads with ``--from`` (``node_name``)."""
    from dataclasses import fields

    from exporter.errors import UserError
    from exporter.options import _flag

    given: frozenset[str] = getattr(args, "_given", frozenset())
    ignored = []
    for f in fields(SourcesOptions):
        flag = _flag(f)
        if f.name not in keep and flag.name in given:
            value = getattr(args, flag.dest, None)
            ignored.append(flag.name if isinstance(value, bool) or value is None
                           else f"{flag.name} {value}")
    if ignored:
        raise UserError(f"--from DIR reads a fixture directory: {', '.join(ignored)} would "
                        "be ignored; drop them, or drop --from to read the live node")
