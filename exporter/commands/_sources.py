"""Source flags shared by ``snapshot``, ``record``, ``doctor`` and ``serve``."""

from __future__ import annotations

import argparse
import os

from exporter.flags import add_flag, parse_duration
from exporter.reader import SourceOptions
from exporter.sources.kubelet import DEFAULT_TOKEN_FILE
from exporter.sources.podresources import DEFAULT_MAX_RECV, DEFAULT_SOCKET


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def add_source_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("sources")
    add_flag(g, "--podresources.socket", default=DEFAULT_SOCKET, metavar="PATH",
             help="the kubelet's PodResources unix socket (mount its directory, not the file)")
    add_flag(g, "--podresources.timeout", default="5s", type=parse_duration,
             metavar="DURATION", help="deadline of every PodResources call")
    add_flag(g, "--podresources.max-receive-bytes", default=DEFAULT_MAX_RECV,
             type=_positive_int, metavar="BYTES",
             help="largest PodResources response accepted (busy nodes exceed gRPC's 4 MiB)")
    add_flag(g, "--kubelet.url", default=None, metavar="URL",
             help="the kubelet's HTTPS endpoint for /pods and /configz, e.g. "
             "https://$HOST_IP:10250 (unset: no pod specs, estimates use the podresources "
             "basis)")
    add_flag(g, "--kubelet.token-file", default=DEFAULT_TOKEN_FILE, metavar="PATH",
             help="bearer token for the kubelet (re-read on every request)")
    add_flag(g, "--kubelet.ca-file", default=None, metavar="PATH",
             help="CA bundle that signed the kubelet's serving certificate")
    add_flag(g, "--kubelet.insecure-skip-verify", action="store_true", default=False,
             help="do not verify the kubelet's certificate (self-signed serving certs)")
    add_flag(g, "--kubelet.root-dir", default=None, metavar="DIR",
             help="the kubelet's root directory, to read its checkpoint files (read-only)")
    add_flag(g, "--sysfs", default="/sys", metavar="DIR",
             help="sysfs mount to read the CPU topology from")
    add_flag(g, "--topology", default=None, metavar="FILE",
             help="a topology.json to use instead of sysfs")
    add_flag(g, "--node-name", default=os.environ.get("NODE_NAME", ""), metavar="NAME",
             help="this node's name, shown in the ledger and the history store")


def source_options(args: argparse.Namespace) -> SourceOptions:
    ns = vars(args)
    return SourceOptions(
        socket=ns["podresources.socket"],
        timeout=ns["podresources.timeout"],
        max_receive_bytes=ns["podresources.max_receive_bytes"],
        kubelet_url=ns["kubelet.url"],
        token_file=ns["kubelet.token_file"],
        ca_file=ns["kubelet.ca_file"],
        insecure_skip_verify=ns["kubelet.insecure_skip_verify"],
        sysfs=None if ns["topology"] else ns["sysfs"],
        topology_file=ns["topology"],
        kubelet_root=ns["kubelet.root_dir"],
        node_name=ns["node_name"],
    )
