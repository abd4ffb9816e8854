"""``podres-exporter demo``: the whole system on a laptop.

Starts a simulated kubelet (the allocator model placing a mixed workload on a 2-socket SMT
node, exporter/demo/workload.yaml) with the kernel files its placements imply (a cgroup tree
with one drifting container, a ``/proc/stat`` busy at exporter.demo.node.DEMO_LOAD), runs
``serve`` against them with the history store in a temporary directory, prints the URLs,
and removes everything on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from exporter import DOCS
from exporter.errors import UserError
from exporter.flags import add_flag, duration
from exporter.options import LogOptions, ModelOptions, PollOptions, WebOptions

if TYPE_CHECKING:
    from exporter.commands.serve import ServeOptions
    from exporter.demo.node import DemoNode

HELP = "run the exporter against a built-in simulated kubelet (nothing to install)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    WebOptions.add_flags(parser, only=("listen_address",), listen_address="127.0.0.1:9847")
    PollOptions.add_flags(parser, only=("interval",), interval=5.0)
    LogOptions.add_flags(parser, level="warn")
    demo = parser.add_argument_group("demo")
    add_flag(demo, "--churn", action="store_true", default=False,
             help="keep adding and removing pods on the simulated node")
    add_flag(demo, "--churn.interval", default="20s", type=duration(0.1, 86400.0),
             metavar="DURATION", help="time between churn steps (default: %(default)s)")
    add_flag(demo, "--arrive", action=argparse.BooleanOptionalAction, default=True,
             help="start with 3 pods and let the rest arrive one a second, each polled at "
             "once: the history then has a moment per arrival for the CPU map's time slider "
             "(the default; --no-arrive: the whole workload at once, one moment)")
    # `--topology SxCxT` is the deprecated spelling (--topology names a topology.json
    # file in every other command); PODRES_TOPOLOGY is not read here.
    add_flag(demo, "--topology.shape", "--topology", default="2x8x2", metavar="SxCxT",
             help="simulated machine: sockets x cores per socket x threads per core "
             "(default: %(default)s)")
    ModelOptions.add_flags(parser, only=("cpu_policy_options",))
    add_flag(demo, "--duration", default=None, type=duration(0.001, 365 * 86400.0),
             metavar="DURATION",
             help="stop by itself after this long (default: run until Ctrl-C)")


def run(args: argparse.Namespace) -> int:
    LogOptions.from_args(args).setup()
    workdir = Path(tempfile.mkdtemp(prefix="podres-demo-", dir="/tmp"))
    try:
        return asyncio.run(_demo(args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _serve_options(args: argparse.Namespace, web: WebOptions, sim: DemoNode, workdir: Path
                   ) -> ServeOptions:
    from exporter.commands.serve import ServeOptions
    from exporter.options import HistoryOptions, KernelSourcesOptions, SourcesOptions

    return ServeOptions(
        web=web,
        poll=PollOptions.from_args(args),
        history=HistoryOptions(url=f"sqlite:///{workdir / 'history.db'}",
                               summary_interval=10.0),
        sources=SourcesOptions(socket=sim.socket_path, kubelet_url=sim.http_url,
                               ca_file=str(sim.cert_path), token_file="",
                               topology=str(sim.topology_file), node_name="demo-node"),
        kernel=KernelSourcesOptions(cgroup_root=sim.cgroup_root, proc_root=sim.proc_root))


def drift_notes(sim: DemoNode) -> list[str]:
    """What the demo does wrong on purpose, said before the operator finds it: the
    container whose cgroup runs on more CPUs than it was given (exporter.demo.node.demo_drift;
    the churn leaves it alone)."""
    from exporter.demo.node import demo_drift
    from reconciler.cpuset import format_cpuset

    notes = []
    for (namespace, pod, container), cpus in sorted(demo_drift(sim.final).items()):
        own = next(c.exclusive for p in sim.final.model.pods.values() for c in p.containers
                   if (p.namespace, p.name, c.name) == (namespace, pod, container))
        notes.append(
            f"  note: {namespace}/{pod}/{container} drifts on purpose: it was given CPUs "
            f"{format_cpuset(own)} but its cgroup runs on {format_cpuset(cpus)}; the "
            "cpuset_drift anomaly it raises after two polls is expected (what it means: "
            f"{{url}}/runbook#{RUNBOOK_ANCHOR})")
    return notes


# The runbook section on cpuset_drift, served by the exporter itself (the package ships the
# runbook; tests/cli checks the anchor is there).
RUNBOOK_ANCHOR = "podresallocationanomaly"


def _print_urls(description: str, notes: Sequence[str] = ()) -> Callable[[str], None]:
    """What the demo prints once it listens; ``{url}`` in a note is the exporter's URL."""
    def ready(url: str) -> None:
        print(f"podres-exporter demo: simulated kubelet: {description}", flush=True)
        print(f"  CPU map and links   {url}/", flush=True)
        print(f"  metrics             {url}/metrics", flush=True)
        print(f"  ledger (JSON)       {url}/api/v1/ledger", flush=True)
        print(f"  history API         {url}/api/v1/nodes", flush=True)
        print(f"  runbook             {url}/runbook", flush=True)
        print(f"  documentation       {DOCS}", flush=True)
        for note in notes:
            print(note.replace("{url}", url), flush=True)
        print("Press Ctrl-C to stop; everything the demo made is removed.", flush=True)
    return ready


def _arrive_after(sim: DemoNode, churn: float | None,
                  ready: Callable[[str], None]) -> Callable[[str], None]:
    """Once the exporter listens (its SIGHUP handler in place), the rest of the workload
    arrives, each pod polled at once with SIGHUP (exporter.demo.node)."""
    def on_ready(url: str) -> None:
        ready(url)
        if sim.waiting:
            sim.start(churn, poll_now=lambda: os.kill(os.getpid(), signal.SIGHUP))
    return on_ready


async def _demo(args: argparse.Namespace, workdir: Path) -> int:
    from exporter.commands.serve import run_service
    from exporter.demo.node import start_demo_node
    from exporter.web.lifecycle import stop_on_signals

    ns = vars(args)
    if "--topology" in getattr(args, "_given", ()):
        from exporter.options import warn_topology_shape

        warn_topology_shape(ns["topology.shape"])
    web = WebOptions.from_args(args)  # a bad address fails before anything starts
    churn = ns["churn.interval"] if ns["churn"] else None
    sim, description = await start_demo_node(
        workdir, ns["topology.shape"], churn=churn, policy_options=ns["cpu_policy_options"],
        arrive=ns["arrive"])
    stop = asyncio.Event()
    stop_on_signals(stop)
    timer = asyncio.get_running_loop().call_later(ns["duration"], stop.set) \
        if ns["duration"] else None
    try:
        await run_service(_serve_options(args, web, sim, workdir),
                          on_ready=_arrive_after(sim, churn, _print_urls(
                              description, drift_notes(sim))), stop=stop)
    except UserError as exc:
        if not str(exc).startswith("cannot listen on"):
            raise
        raise UserError(f"{exc}; --web.listen-address=127.0.0.1:0 picks a free port (with "
                        "make: make demo ARGS=--web.listen-address=127.0.0.1:0)") from None
    finally:
        if timer is not None:
            timer.cancel()
        await sim.stop()
    print("podres-exporter demo: stopped", file=sys.stderr)
    return 0
