"""``podres-exporter sim``: a simulated kubelet on a real unix socket (and HTTPS)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import signal
import sys
from typing import Any

from exporter.errors import UserError
from exporter.flags import add_flag, parse_duration

HELP = "serve a fixture directory (or the allocator model's placement) as a kubelet would"

_MODEL = "exporter.sim.model_driven"


def _model_driven() -> Any:
    if importlib.util.find_spec(_MODEL) is None:
        return None
    return importlib.import_module(_MODEL)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--from", dest="from_dir", default=None, metavar="DIR",
             help="fixture directory to serve (re-read on SIGHUP)")
    add_flag(parser, "--socket", default="./kubelet.sock", metavar="PATH",
             help="where to create the PodResources unix socket")
    add_flag(parser, "--http-listen", default=None, metavar="HOST:PORT",
             help="also serve /pods, /configz and /metrics over HTTPS (self-signed)")
    add_flag(parser, "--token", default=None, metavar="TOKEN",
             help="require this bearer token on HTTPS requests")
    misbehave = parser.add_argument_group("misbehaviour (for tests)")
    add_flag(misbehave, "--unimplemented", default="", metavar="RPC[,RPC]",
             help="answer UNIMPLEMENTED for these RPCs (List, GetAllocatableResources, Get)")
    add_flag(misbehave, "--delay", default="0s", type=parse_duration, metavar="DURATION",
             help="delay every answer by this long")
    add_flag(misbehave, "--forbid", default="", metavar="PATH[,PATH]",
             help="answer 403 on these HTTPS paths, e.g. /pods")
    model = _model_driven()
    if model is not None:
        model.add_arguments(parser.add_argument_group("model-driven node"))


def run(args: argparse.Namespace) -> int:
    if getattr(args, "topology", None):
        model = _model_driven()
        if model is None:
            raise UserError("the model-driven simulator is not available in this build")
        code: int = model.run(args)
        return code
    if not args.from_dir:
        raise UserError("give --from DIR (a fixture directory) or --topology SxCxT")
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


async def serve_until_stopped(sim: Any, reload: Any = None) -> None:
    """Start ``sim``, print where it listens, reload on SIGHUP, stop on SIGINT/SIGTERM."""
    await sim.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    if reload is not None:
        def on_hup() -> None:
            try:
                reload()
                print("sim: reloaded", file=sys.stderr, flush=True)
            except UserError as exc:
                print(f"sim: reload failed, still serving the previous state: {exc}",
                      file=sys.stderr, flush=True)
        loop.add_signal_handler(signal.SIGHUP, on_hup)
    from exporter.sim.server import describe

    info = describe(sim)
    print(f"sim: PodResources on unix://{info['socket']}", flush=True)
    if info["https"]:
        print(f"sim: kubelet HTTPS on {info['https']} (CA file {info['ca_file']})", flush=True)
    try:
        await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            await sim.stop()


async def _serve_fixture(args: argparse.Namespace) -> int:
    from exporter.sim.server import SimKubelet
    from exporter.sources.fixture import load_fixture_dir

    fixture = load_fixture_dir(args.from_dir)
    sim = SimKubelet(fixture, socket_path=args.socket, http_listen=args.http_listen,
                     token=args.token, misbehaviour=misbehaviour_from_args(args))

    def reload() -> None:
        sim.set_state(load_fixture_dir(args.from_dir))

    try:
        await serve_until_stopped(sim, reload)
    except OSError as exc:
        raise UserError(f"cannot listen: {exc}") from None
    return 0
