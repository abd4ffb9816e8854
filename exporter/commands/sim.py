"""``podres-exporter sim``: a simulated kubelet on a real unix socket (and HTTPS), serving
a fixture directory (``--from DIR``) or the allocator model's placement of manifests on a
modelled node (``--topology FILE`` or ``--topology.shape SxCxT``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exporter.errors import UserError
from exporter.flags import add_flag, duration
from exporter.options import ModelOptions
from reconciler.allocator.report import STYLES

if TYPE_CHECKING:
    from exporter.sim.cgroupfs import SimKernel
    from exporter.sim.model_driven import ChangeReport, ModelDrivenNode
    from exporter.sim.server import SimKubelet

HELP = "serve a fixture directory (or the allocator model's placement) as a kubelet would"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--from", dest="from_dir", default=None, metavar="DIR",
             help="fixture directory to serve (re-read on SIGHUP)")
    add_flag(parser, "--socket", default="./kubelet.sock", metavar="PATH",
             help="where to create the PodResources unix socket (default: %(default)s)")
    add_flag(parser, "--http-listen", default=None, metavar="HOST:PORT",
             help="also serve /pods, /configz and /metrics over HTTPS (self-signed)")
    add_flag(parser, "--token", default=None, metavar="TOKEN",
             help="require this bearer token on HTTPS requests")
    misbehave = parser.add_argument_group("misbehaviour (for tests)")
    add_flag(misbehave, "--unimplemented", default="", metavar="RPC[,RPC]",
             help="answer UNIMPLEMENTED for these RPCs (List, GetAllocatableResources, Get)")
    add_flag(misbehave, "--delay", default="0s", type=duration(0.0, 86400.0), metavar="DURATION",
             help="delay every answer by this long (default: %(default)s)")
    add_flag(misbehave, "--forbid", default="", metavar="PATH[,PATH]",
             help="answer 403 on these HTTPS paths, e.g. /pods")
    ModelOptions.add_flags(parser)
    driven = parser.add_argument_group("model-driven node")
    add_flag(driven, "--manifests", default=None, metavar="PATH",
             help="manifest file or directory of pods to place (polled for changes)")
    add_flag(driven, "--reporting", default="1.37", choices=STYLES,
             help="which kubelet's reporting style to serve (default: %(default)s)")
    add_flag(driven, "--manifests-poll", default="1s", type=duration(0.01, 3600.0),
             metavar="DURATION",
             help="how often the manifests path is checked for changes (default: %(default)s)")
    add_flag(driven, "--cgroup-dir", default=None, metavar="DIR",
             help="also write the cgroup tree a kernel would show for these placements here "
             "(the exporter's --cgroup.root; with --proc-dir)")
    add_flag(driven, "--proc-dir", default=None, metavar="DIR",
             help="also keep a stat file here whose CPUs are busy at --load (the exporter's "
             "--proc.root; with --cgroup-dir)")
    add_flag(driven, "--load", default="", metavar="POOL=FRACTION[,...]",
             help="busy fraction of each pool's CPUs in --proc-dir/stat, e.g. "
             "pod_shared=0.9,node_shared=0.3 (default: idle)")
    add_flag(driven, "--drift", default="", metavar="NS/POD/CONTAINER=CPUSET[;...]",
             help="containers whose cgroup in --cgroup-dir runs them on other CPUs than "
             "placed (cpuset_drift)")
    add_flag(driven, "--topology-file", default=None, metavar="FILE",
             help="also write the modelled node's topology.json here (for the exporter's "
             "--topology)")


def run(args: argparse.Namespace) -> int:
    model = ModelOptions.from_args(args)
    if model.given:
        return asyncio.run(_serve_model(args, model))
    if not args.from_dir:
        raise UserError("give --from DIR (a fixture directory), --topology FILE or "
                        "--topology.shape SxCxT (a modelled node)")
    return asyncio.run(_serve_fixture(args))


def misbehaviour_from_args(args: argparse.Namespace) -> Any:
    from exporter.sim.server import RPCS, Misbehaviour

    unimplemented = {r.strip() for r in args.unimplemented.split(",") if r.strip()}
    unknown = unimplemented - set(RPCS)
    if unknown:
        raise UserError(f"--unimplemented: unknown RPC {', '.join(sorted(unknown))} "
                        f"(known: {', '.join(RPCS)})")
    forbidden = {p.strip() for p in args.forbid.split(",") if p.strip()}
    return Misbehaviour(unimplemented=unimplemented, delay=args.delay,
                        forbidden_paths=forbidden)


def _simulator(state: Any, args: argparse.Namespace) -> SimKubelet:
    from exporter.sim.server import SimKubelet

    return SimKubelet(state, socket_path=args.socket, http_listen=args.http_listen,
                      token=args.token, misbehaviour=misbehaviour_from_args(args))


def refuse_socket_in_use(path: str) -> None:
    """A second simulator must not take over a live one's socket (starting unlinks the
    path), nor delete a file that is not a socket."""
    import socket
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:  # a path under a regular file, a loop of links...
        raise UserError(f"--socket {path}: {exc.strerror or exc}") from None
    if not stat.S_ISSOCK(mode):
        raise UserError(f"--socket {path}: exists and is not a socket")
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(path)
        except OSError:
            return  # left behind by a simulator that exited
    raise UserError(f"--socket {path}: another process is serving it (stop it or choose "
                    "another path)")


def client_flags(info: Mapping[str, Any], topology_file: str | None,
                 kernel: tuple[str, str] | None = None) -> str:
    """The exporter flags that read this simulator as the node it simulates, as a shell
    line. ``kernel`` is the simulated (cgroup root, proc root); without it the kernel
    sources are turned off: this host's cgroups and /proc/stat are not the simulated
    node's, and their busy time would be drawn on its CPUs."""
    from shlex import quote

    flags = [f"--podresources.socket {quote(os.path.abspath(info['socket']))}"]
    if info["https"]:
        flags.append(f"--kubelet.url {quote(info['https'])} "
                     f"--kubelet.ca-file {quote(info['ca_file'])}")
    if topology_file:
        flags.append(f"--topology {quote(topology_file)}")
    cgroup, proc = kernel or ("", "")
    flags.append(f"--cgroup.root {quote(cgroup)} --proc.root {quote(proc)}")
    return " ".join(flags)


async def serve_until_stopped(sim: SimKubelet, reload: Callable[[], None] | None = None, *,
                              topology_file: str | None = None,
                              kernel: tuple[str, str] | None = None) -> None:
    """Start ``sim``, print where it listens and the exporter flags that read it, reload on
    SIGHUP, stop on SIGINT/SIGTERM."""
    from exporter.sim.server import describe
    from exporter.web.lifecycle import stop_on_signals

    refuse_socket_in_use(sim.socket_path)
    try:
        await sim.start()
    except OSError as exc:
        raise UserError(f"cannot listen: {exc}") from None
    stop = asyncio.Event()

    def on_hup() -> None:
        assert reload is not None
        try:
            reload()
            print("sim: reloaded", file=sys.stderr, flush=True)
        except UserError as exc:
            print(f"sim: reload failed, still serving the previous state: {exc}",
                  file=sys.stderr, flush=True)

    stop_on_signals(stop, on_hup=on_hup if reload is not None else None)
    info = describe(sim)
    print(f"sim: PodResources on unix://{info['socket']}", flush=True)
    if info["https"]:
        print(f"sim: kubelet HTTPS on {info['https']} (CA file {info['ca_file']})", flush=True)
    print(f"sim: exporter flags: {client_flags(info, topology_file, kernel)}", flush=True)
    if topology_file is None:
        print("sim: without --topology the exporter reads this host's CPUs, not the simulated "
              "node's", flush=True)
    try:
        await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            await sim.stop()


async def _serve_fixture(args: argparse.Namespace) -> int:
    from exporter.sources.fixture import load_fixture_dir

    fixture = load_fixture_dir(args.from_dir)
    sim = _simulator(fixture, args)

    def reload() -> None:
        sim.set_state(load_fixture_dir(args.from_dir))

    topology = Path(args.from_dir, "topology.json")
    await serve_until_stopped(sim, reload,
                              topology_file=str(topology.resolve()) if topology.is_file() else None)
    return 0


# ---- the model-driven node ------------------------------------------------------------


def _print_changes(report: ChangeReport) -> None:
    for ns, name in report.released:
        print(f"sim: released {ns}/{name}", file=sys.stderr, flush=True)
    for placement in report.admitted:
        print(f"sim: placed {placement.namespace}/{placement.name}", file=sys.stderr,
              flush=True)
    for r in report.rejected:
        print(f"sim: rejected {r.namespace}/{r.name}: {r.reason}", file=sys.stderr, flush=True)


async def _watch_manifests(path: Path, interval: float, reload: Callable[[], None]) -> None:
    """Re-place the pods whenever a file under ``path`` changes."""
    from exporter.sim.model_driven import fingerprint

    last = fingerprint(path)
    while True:
        await asyncio.sleep(interval)
        try:
            now = fingerprint(path) if path.exists() else b""
        except OSError:
            continue
        if now == last:
            continue
        last = now
        try:
            reload()
        except UserError as exc:
            print(f"sim: manifests not applied, still serving the previous state: {exc}",
                  file=sys.stderr, flush=True)


def _model_node(args: argparse.Namespace, model: ModelOptions) -> ModelDrivenNode:
    import json

    from exporter.sim.model_driven import ModelDrivenNode, desired_pods

    topology, config = model.build()
    assert topology is not None  # model.given
    node = ModelDrivenNode(topology, config, args.reporting,
                           devices=model.node_devices(topology))
    if args.manifests and not Path(args.manifests).exists():
        raise UserError(f"--manifests {args.manifests}: no such file or directory")
    _print_changes(node.sync(desired_pods(args.manifests)))
    if args.topology_file:
        Path(args.topology_file).write_text(json.dumps(node.topology_json(), indent=1),
                                            encoding="utf-8")
    print(f"sim: model-driven node {model.describe()}: {node.summary()}", flush=True)
    return node


def _sim_kernel(args: argparse.Namespace, node: ModelDrivenNode) -> SimKernel | None:
    """The kernel files of ``--cgroup-dir`` / ``--proc-dir`` (docs/kernel.md), if asked."""
    from exporter.sim.cgroupfs import SimKernel, parse_drift, parse_pool_loads

    if not (args.cgroup_dir or args.proc_dir):
        if args.load or args.drift:
            raise UserError("--load and --drift need --cgroup-dir and --proc-dir")
        return None
    if not (args.cgroup_dir and args.proc_dir):
        raise UserError("--cgroup-dir and --proc-dir go together")
    kernel = SimKernel(node.model, args.cgroup_dir, Path(args.proc_dir, "stat"),
                       load_by_pool=parse_pool_loads(args.load), drift=parse_drift(args.drift))
    return kernel


def _state(node: ModelDrivenNode, kernel: SimKernel | None) -> Any:
    """The kubelet's answers; with kernel files, ``/pods`` carries the container ids their
    cgroups are named after."""
    from exporter.sim.cgroupfs import decorate_pod_list

    state = node.state()
    if kernel is None or state.pod_list is None:
        return state
    kernel.sync()
    return replace(state, pod_list=decorate_pod_list(state.pod_list))


async def _serve_model(args: argparse.Namespace, model: ModelOptions) -> int:
    from exporter.sim.model_driven import desired_pods

    node = _model_node(args, model)
    kernel = _sim_kernel(args, node)
    sim = _simulator(_state(node, kernel), args)

    def reload() -> None:
        _print_changes(node.sync(desired_pods(args.manifests)))
        sim.set_state(_state(node, kernel))

    tasks = [asyncio.create_task(_watch_manifests(Path(args.manifests), args.manifests_poll,
                                                  reload))] if args.manifests else []
    if kernel is not None:
        tasks.append(asyncio.create_task(kernel.run()))
    try:
        dirs = None if kernel is None else (os.path.abspath(args.cgroup_dir),
                                            os.path.abspath(args.proc_dir))
        await serve_until_stopped(sim, reload,
                                  topology_file=args.topology_file or model.topology_file,
                                  kernel=dirs)
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return 0
