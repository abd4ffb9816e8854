"""``podres-exporter demo``: the whole system on a laptop.

Starts a simulated kubelet (the allocator model placing a mixed workload on a 2-socket SMT
node, exporter/demo/workload.yaml), runs ``serve`` against it with the
history store in a temporary directory, prints the URLs, and removes everything on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from exporter.flags import add_flag, parse_duration

HELP = "run the exporter against a built-in simulated kubelet (nothing to install)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--web.listen-address", default="127.0.0.1:9847", metavar="HOST:PORT",
             help="where the exporter listens (port 0 picks a free one)")
    add_flag(parser, "--poll.interval", default="5s", type=parse_duration, metavar="DURATION",
             help="poll interval of the exporter")
    add_flag(parser, "--churn", action="store_true", default=False,
             help="keep adding and removing pods on the simulated node")
    add_flag(parser, "--churn.interval", default="20s", type=parse_duration,
             metavar="DURATION", help="time between churn steps")
    add_flag(parser, "--topology", dest="demo_topology", default="2x8x2", metavar="SxCxT",
             help="simulated machine: sockets x cores per socket x threads per core")
    add_flag(parser, "--duration", default=None, type=parse_duration, metavar="DURATION",
             help="stop by itself after this long (default: run until Ctrl-C)")


def run(args: argparse.Namespace) -> int:
    from exporter.logs import setup_logging

    setup_logging("warning", "logfmt")
    workdir = Path(tempfile.mkdtemp(prefix="podres-demo-", dir="/tmp"))
    try:
        return asyncio.run(_demo(args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


async def _demo(args: argparse.Namespace, workdir: Path) -> int:
    from exporter.cli import build_parser
    from exporter.commands.serve import serve
    from exporter.demo.node import start_demo_node

    ns = vars(args)
    sim, description = await start_demo_node(
        workdir, ns["demo_topology"], churn=ns["churn.interval"] if ns["churn"] else None)
    topology_file = sim.topology_file
    serve_argv = [
        "serve",
        "--podresources.socket", sim.socket_path,
        "--kubelet.url", str(sim.http_url),
        "--kubelet.ca-file", str(sim.cert_path),
        "--kubelet.token-file", "",
        "--web.listen-address", ns["web.listen_address"],
        "--poll.interval", f"{ns['poll.interval']}s",
        "--history.url", f"sqlite:///{workdir / 'history.db'}",
        "--history.summary-interval", "10s",
        "--node-name", "demo-node",
    ]
    serve_argv += ["--topology", str(topology_file)]
    serve_args = build_parser().parse_args(serve_argv)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def ready(url: str) -> None:
        print(f"podres-exporter demo: simulated kubelet: {description}", flush=True)
        print(f"  CPU map and links   {url}/", flush=True)
        print(f"  metrics             {url}/metrics", flush=True)
        print(f"  ledger (JSON)       {url}/api/v1/ledger", flush=True)
        print(f"  history API         {url}/api/v1/nodes", flush=True)
        print("Press Ctrl-C to stop; everything the demo made is removed.", flush=True)

    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
    timer = None
    if ns["duration"]:
        timer = loop.call_later(ns["duration"], stop.set)
    try:
        await serve(serve_args, on_ready=ready, stop=stop)
    finally:
        if timer is not None:
            timer.cancel()
        await sim.stop()
    print("podres-exporter demo: stopped", file=sys.stderr)
    return 0
