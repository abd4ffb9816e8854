"""Exporter benchmark: ``python -m bench.scrape [--pods 1000] [--cpus 512]``.

A synthetic node (bench.synth) is served by the simulated kubelet (gRPC on a unix socket,
HTTPS for /pods and /configz) in a process of its own, as a kubelet is. In one run it
measures, each against a floor measured in the same run:

- scrape: ``/metrics`` latency p99 under ``--scrapers`` concurrent scrapers of a real
  ``podres-exporter serve`` process, against the p99 of the same aiohttp application (the
  exporter's ``build_app``, middleware and encoding negotiation included) in a process of
  its own, whose /metrics returns a static body of the same bytes. Both encodings, each
  against a static body of the same encoding (the plain bytes, and those bytes gzipped
  once): ``Accept-Encoding: identity``, and ``gzip`` as Prometheus sends it (the scrapers
  do not decompress, so the figures are the server's). The servers are measured in
  alternating phases so that drift of the machine hits all alike. Target: ratio ≤ 1.2 for
  each encoding.
- poll: a steady ``Exporter.poll_once`` (nothing changed on the node) against the floor of
  bench.cycle: the ``List`` + ``GetAllocatableResources`` round trip and protobuf decode,
  measured in the same rounds as the polls; the ratio is minimum over minimum, as
  bench.cycle's (the median of the rounds' ratios is given for information).
  Headline with the PodResources source (the floor's sources); with the kubelet's HTTPS
  endpoint as well for information. Target: ratio ≤ 2.
- memory: resident set (VmRSS) of the ``serve`` process at steady state, after the scrape
  phases, as deployed by default: the kubelet source and a SQLite history store on, against
  the import floor (a process importing the runtime dependencies and nothing else). Targets:
  ≤ 70 MiB and ≤ 1.15× the floor (issue 33; 1.2× before it). Printed with where it goes
  (bench.memory): interpreter, imports by package, what ``serve`` imports, ``serve`` on a
  node of one pod (the cost
  before any node data), the node's data over it, the history store at run time, the
  rendered bodies, and the process's mappings by allocator.

A ``serve`` with ``--history.url off`` gives the history store's share of the memory;
unless ``--quick``, its scrape figures are taken too, for information. The one-pod node is
served by a second simulator; ``serve`` runs on it with and without the history store.

Prints a table and, as its last line, one JSON object with the figures and the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import aiohttp

from bench.cycle import paired_ratio, ratio_of_minima
from bench.memory import import_figures, smaps_breakdown
from bench.synth import generate
from exporter.metrics.compression import Encoding, gzip_bytes
from exporter.reader import NodeReader, SourceOptions
from exporter.service import Exporter, ServiceOptions
from exporter.sim.server import SimKubelet
from exporter.sources.podresources import (
    PodResourcesClient,
    decode_allocatable_message,
    decode_list,
)
from exporter.sources.topology import topology_to_json

SCRAPE_TARGET = 1.2
ENCODINGS: tuple[Encoding, ...] = ("identity", "gzip")
POLL_TARGET = 2.0
RSS_TARGET_MIB = 70.0
RSS_FLOOR_TARGET = 1.15  # × the import floor (issue 33)
STEADY_SETTLE = 3.0  # seconds after the first ledger: later polls find nothing new
READY_TIMEOUT = 60.0


# -- helpers --------------------------------------------------------------------------------

def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100.0 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def vm_status(pid: int | str = "self") -> dict[str, float]:
    """VmRSS and VmHWM of a process, in MiB."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = round(int(rest.split()[0]) / 1024.0, 1)
    return out


@contextlib.contextmanager
def _process(argv: list[str]) -> Iterator[subprocess.Popen[str]]:
    env = dict(os.environ, GRPC_VERBOSITY="ERROR")
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # every child here cleans up on Ctrl-C
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def _read_url(process: subprocess.Popen[str], *, stream: str) -> str:
    """The base URL a child announces: ``serve``'s JSON "listening" log line on stderr, or
    the static server's first stdout line."""
    pipe = process.stderr if stream == "stderr" else process.stdout
    assert pipe is not None
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        line = await asyncio.wait_for(loop.run_in_executor(None, pipe.readline),
                                      timeout=READY_TIMEOUT)
        if not line:
            break
        if stream == "stdout":
            return line.strip()
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if record.get("msg") == "listening":
                return str(record["url"])
    raise RuntimeError(f"{process.args!r} did not announce its URL "
                       f"(exit status {process.poll()})")


# -- the static twin --------------------------------------------------------------------------

class _StaticBody:
    """Stands in for the Exporter in ``build_app``: /metrics returns fixed bytes, in either
    encoding."""

    def __init__(self, body: bytes) -> None:
        self.bodies = {"identity": body, "gzip": gzip_bytes(body)}
        self.ready = True
        self.last_success = 0.0

    def metrics_body(self, encoding: Encoding = "identity") -> tuple[bytes, bytes]:
        return self.bodies[encoding], b""

    def current(self) -> None:
        return None


async def _static_server(body_file: str) -> None:
    from aiohttp import web

    from exporter.web.app import build_app

    app = build_app(cast(Exporter, _StaticBody(Path(body_file).read_bytes())))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = cast(Any, site)._server
    port = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


# -- scrape latency ---------------------------------------------------------------------------

async def _scrape_phase(url: str, *, scrapers: int, requests: int, encoding: Encoding
                        ) -> tuple[list[float], int]:
    """``scrapers`` concurrent clients (one keep-alive connection each, as Prometheus
    keeps), ``requests`` scrapes each, asking for ``encoding`` and decompressing nothing;
    returns the latencies (s) and the body size."""
    latencies: list[float] = []
    sizes: set[int] = set()

    async def scraper() -> None:
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                         headers={"Accept-Encoding": encoding}) as session:
            for _ in range(requests):
                start = time.perf_counter()
                async with session.get(url + "/metrics") as response:
                    body = await response.read()
                latencies.append(time.perf_counter() - start)
                if response.status != 200:
                    raise RuntimeError(f"{url}/metrics answered {response.status}")
                if response.headers.get("Content-Encoding", "identity") != encoding:
                    raise RuntimeError(f"{url}/metrics ignored Accept-Encoding: {encoding}")
                sizes.add(len(body))

    await asyncio.gather(*(scraper() for _ in range(scrapers)))
    return latencies, max(sizes)


def _key(name: str, encoding: Encoding) -> str:
    """Figure names: the plain encoding keeps the names earlier runs printed; gzip's have
    ``gzip`` after the first word (``scrape_gzip_ratio``, ``body_gzip_bytes``)."""
    first, _, rest = name.partition("_")
    return name if encoding == "identity" else f"{first}_{encoding}_{rest}"


async def measure_scrapes(exporter_url: str, static_url: str, *, scrapers: int,
                          requests: int, phases: int) -> dict[str, Any]:
    servers = {"exporter": exporter_url, "static": static_url}
    latencies: dict[tuple[str, Encoding], list[float]] = {}
    sizes: dict[tuple[str, Encoding], int] = {}
    # Warm all (connections, caches, the interpreters) before anything counts.
    for url in servers.values():
        for encoding in ENCODINGS:
            await _scrape_phase(url, scrapers=scrapers, requests=10, encoding=encoding)
    for _ in range(phases):
        for encoding in ENCODINGS:
            for name, url in servers.items():
                gc.collect()
                lat, sizes[name, encoding] = await _scrape_phase(
                    url, scrapers=scrapers, requests=requests, encoding=encoding)
                latencies.setdefault((name, encoding), []).extend(lat)
    out: dict[str, Any] = {}
    for encoding in ENCODINGS:
        served, static = latencies["exporter", encoding], latencies["static", encoding]
        p99, p99_static = percentile(served, 99), percentile(static, 99)
        figures = {
            "scrape_p99_ms": _ms(p99), "static_p99_ms": _ms(p99_static),
            "scrape_p50_ms": _ms(percentile(served, 50)),
            "static_p50_ms": _ms(percentile(static, 50)),
            "scrape_ratio": round(p99 / p99_static, 2),
            "body_bytes": sizes["exporter", encoding],
            "static_body_bytes": sizes["static", encoding],
        }
        out.update({_key(k, encoding): v for k, v in figures.items()})
    out["scrapes"] = len(latencies["exporter", "identity"])
    return out


# -- the simulated kubelet, in a process of its own ----------------------------------------

async def _sim_server(workdir: str, pods: int, cpus: int, seed: int) -> None:
    """Serve the synthetic node; print where (one JSON line) and run until killed. A process
    of its own, so that serving 1000 pods never stalls the scrapers that take the figures."""
    node = generate(pods, cpus, seed=seed)
    root = Path(workdir)
    topology_file = root / "topology.json"
    topology_file.write_text(json.dumps(topology_to_json(node.topology)))
    token_file = root / "token"
    token_file.write_text("bench-token\n")
    sim = SimKubelet(node.state, socket_path=str(root / "kubelet.sock"),
                     http_listen="127.0.0.1:0", token="bench-token")
    await sim.start()
    print(json.dumps({"socket": sim.socket_path, "https": sim.http_url,
                      "ca_file": str(sim.cert_path), "token_file": str(token_file),
                      "topology": str(topology_file)}), flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await sim.stop()


# -- poll cycle -------------------------------------------------------------------------------

async def measure_polls(sim: dict[str, str], *, rounds: int) -> dict[str, Any]:
    client = PodResourcesClient(sim["socket"])

    async def floor_once() -> None:
        list_raw = await client.list_raw()
        alloc_raw = await client.allocatable_raw()
        decode_list(list_raw)
        if alloc_raw is not None:
            decode_allocatable_message(alloc_raw)

    async def timed_floor() -> float:
        start = time.perf_counter()
        await floor_once()
        return time.perf_counter() - start

    base = SourceOptions(socket=sim["socket"], token_file=None, sysfs=None,
                         topology_file=sim["topology"], node_name="bench")
    exporters = {
        "podresources": Exporter(NodeReader(base), ServiceOptions()),
        "with_kubelet": Exporter(NodeReader(replace(
            base, kubelet_url=sim["https"], ca_file=sim["ca_file"],
            token_file=sim["token_file"])), ServiceOptions()),
    }
    floor: list[float] = []
    steady: dict[str, list[float]] = {name: [] for name in exporters}
    unchanged = True
    try:
        for _ in range(5):
            await floor_once()
        for exporter in exporters.values():
            for _ in range(3):  # the first poll reconciles; later ones find nothing new
                assert await exporter.poll_once(), "poll failed"
        for _ in range(rounds):  # interleaved, so drift hits floor and cycle alike
            gc.collect()
            floor.append(await timed_floor())
            for name, exporter in exporters.items():
                start = time.perf_counter()
                ok = await exporter.poll_once()
                steady[name].append(time.perf_counter() - start)
                assert ok, f"poll failed: {dict(exporter.state.errors_total)}"
        for exporter in exporters.values():
            before = exporter.state.published
            await exporter.poll_once()
            unchanged = unchanged and exporter.state.published is before
    finally:
        await client.close()
        for exporter in exporters.values():
            await exporter.reader.close()
    floor_s = statistics.median(floor)
    head = statistics.median(steady["podresources"])
    extra = statistics.median(steady["with_kubelet"])

    return {
        "poll_floor_ms": _ms(floor_s), "poll_steady_ms": _ms(head),
        "poll_ratio": ratio_of_minima(steady["podresources"], floor),
        "poll_ratio_paired": paired_ratio(steady["podresources"], floor),
        "poll_steady_with_kubelet_ms": _ms(extra),
        "poll_with_kubelet_ratio": ratio_of_minima(steady["with_kubelet"], floor),
        "poll_unchanged": unchanged, "poll_rounds": rounds,
    }


# -- the run ----------------------------------------------------------------------------------

async def _serve_phase(serve_argv: list[str], workdir: Path, args: argparse.Namespace,
                       result: dict[str, Any], suffix: str) -> None:
    """Start ``serve``, compare its scrapes with the static twin's, sample its memory."""
    with _process(serve_argv) as serve:
        exporter_url = await _read_url(serve, stream="stderr")
        body = await _wait_for_ledger(exporter_url)
        body_file = workdir / f"body{suffix}.prom"
        body_file.write_bytes(body)
        with _process([sys.executable, "-m", "bench.scrape", "--static-server",
                       str(body_file)]) as static:
            static_url = await _read_url(static, stream="stdout")
            figures = await measure_scrapes(exporter_url, static_url, scrapers=args.scrapers,
                                            requests=args.requests, phases=args.phases)
            static_mem = vm_status(static.pid)
        await asyncio.sleep(1.0)  # let the scrape buffers go before sampling
        mem = vm_status(serve.pid)
        where = smaps_breakdown(serve.pid)
        if serve.poll() is not None:
            raise RuntimeError("serve exited during the benchmark")
    if suffix:
        for encoding in ENCODINGS:
            result.update({
                _key("scrape_p99", encoding) + suffix + "_ms":
                    figures[_key("scrape_p99_ms", encoding)],
                _key("static_p99", encoding) + suffix + "_ms":
                    figures[_key("static_p99_ms", encoding)],
                _key("scrape_ratio", encoding) + suffix:
                    figures[_key("scrape_ratio", encoding)]})
        result["rss" + suffix + "_mib"] = mem["VmRSS"]
    else:
        result.update(figures)
        result.update({"rss_mib": mem["VmRSS"], "rss_peak_mib": mem["VmHWM"],
                       "static_server_rss_mib": static_mem["VmRSS"],
                       "rss_maps": where})


async def _rss_phase(serve_argv: list[str]) -> float:
    """VmRSS of a ``serve`` at steady state (its ledger published, a second later), no
    scrapes measured."""
    with _process(serve_argv) as serve:
        await _wait_for_ledger(await _read_url(serve, stream="stderr"))
        await asyncio.sleep(STEADY_SETTLE)
        return vm_status(serve.pid)["VmRSS"]


async def _one_pod_node(workdir: Path, args: argparse.Namespace) -> dict[str, float]:
    """``serve``'s resident set on a node of one pod, with and without the history store:
    what the process costs before any node data, which no cut to the node's data can
    lower."""
    root = workdir / "one-pod"
    root.mkdir()
    with _process([sys.executable, "-m", "bench.scrape", "--sim-server", str(root),
                   "--pods", "1", "--cpus", str(args.cpus),
                   "--seed", str(args.seed)]) as sim_process:
        sim = json.loads(await _read_url(sim_process, stream="stdout"))
        argv = _serve_argv(sim, args.poll_interval, f"sqlite:///{root / 'history.db'}")
        return {"rss_one_pod_mib": await _rss_phase(argv),
                "rss_one_pod_no_history_mib": await _rss_phase([*argv[:-1], "off"])}


def _serve_argv(sim: dict[str, str], poll_interval: str, history: str) -> list[str]:
    return [
        sys.executable, "-m", "exporter.cli", "serve",
        "--web.listen-address", "127.0.0.1:0", "--log.format", "json",
        "--podresources.socket", sim["socket"], "--topology", sim["topology"],
        "--kubelet.url", sim["https"], "--kubelet.ca-file", sim["ca_file"],
        "--kubelet.token-file", sim["token_file"], "--node-name", "bench",
        "--poll.interval", poll_interval, "--history.url", history,
    ]


def _memory_breakdown(result: dict[str, Any]) -> None:
    """The serve RSS figures against the import floor, and where the memory goes."""
    floor = result["import_floor_mib"]
    result["rss_ratio"] = round(result["rss_mib"] / floor, 2)
    result["rss_breakdown_mib"] = {
        "interpreter": result["interpreter_mib"],
        **{f"import {name}": result[f"import_{name}_mib"]
           for name in ("grpc", "aiohttp", "protobuf", "sqlalchemy", "prometheus_client")},
        "serve's imports (prometheus_client not among them)": result["serve_imports_mib"],
        "  of which the history store's (its embedded write path, sqlite3)": round(
            result["serve_imports_mib"] - result["serve_imports_no_history_mib"], 1),
        "serve on a one-pod node": result["rss_one_pod_mib"],
        "  the same, --history.url off": result["rss_one_pod_no_history_mib"],
        "node data over the one-pod node": round(
            result["rss_mib"] - result["rss_one_pod_mib"], 1),
        "  of which the rendered /metrics bodies (plain + gzip)": round(
            (result["body_bytes"] + result["body_gzip_bytes"]) / 2**20, 1),
        "history store at run time": round(
            result["rss_mib"] - result["rss_no_history_mib"]
            - (result["serve_imports_mib"] - result["serve_imports_no_history_mib"]), 1),
    }


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    node = generate(args.pods, args.cpus, seed=args.seed)
    result: dict[str, Any] = {"pods": len(node.pods), "containers": node.containers,
                              "cpus": len(node.topology.cpus)}
    del node  # the simulator process builds its own copy from the same seed
    with _process([sys.executable, "-m", "bench.scrape", "--sim-server", str(workdir),
                   "--pods", str(args.pods), "--cpus", str(args.cpus),
                   "--seed", str(args.seed)]) as sim_process:
        sim = json.loads(await _read_url(sim_process, stream="stdout"))
        result.update(await measure_polls(sim, rounds=args.rounds))
        serve_argv = _serve_argv(sim, args.poll_interval,
                                 f"sqlite:///{workdir / 'history.db'}")
        await _serve_phase(serve_argv, workdir, args, result, "")
        no_history = [*serve_argv[:-1], "off"]
        if not args.quick:  # the same without the history store, for information
            await _serve_phase(no_history, workdir, args, result, "_no_history")
        else:
            result["rss_no_history_mib"] = await _rss_phase(no_history)
    result.update(await _one_pod_node(workdir, args))
    result.update(await asyncio.to_thread(import_figures))
    _memory_breakdown(result)
    result["ok"] = bool(result["scrape_ratio"] <= SCRAPE_TARGET
                        and result["scrape_gzip_ratio"] <= SCRAPE_TARGET
                        and result["poll_ratio"] <= POLL_TARGET
                        and result["rss_mib"] <= RSS_TARGET_MIB
                        and result["rss_ratio"] <= RSS_FLOOR_TARGET)
    return result


async def _wait_for_ledger(url: str) -> bytes:
    """The first plain /metrics body that carries the ledger (a first poll happened)."""
    async with aiohttp.ClientSession(headers={"Accept-Encoding": "identity"}) as session:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            async with session.get(url + "/metrics") as response:
                body = await response.read()
            if b"\npodres_up 1" in body and b"podres_container_cpus{" in body:
                return body
            await asyncio.sleep(0.1)
    raise RuntimeError("serve published no ledger")


def table(r: dict[str, Any]) -> str:
    def verdict(ok: bool) -> str:
        return "ok" if ok else "OVER"

    rows = [
        ("/metrics p99, exporter", r["scrape_p99_ms"], "ms", ""),
        ("/metrics p99, static twin", r["static_p99_ms"], "ms", ""),
        ("  ratio", r["scrape_ratio"], "×",
         f"≤ {SCRAPE_TARGET:g} {verdict(r['scrape_ratio'] <= SCRAPE_TARGET)}"),
        ("/metrics p99 gzip, exporter", r["scrape_gzip_p99_ms"], "ms", ""),
        ("/metrics p99 gzip, static twin", r["static_gzip_p99_ms"], "ms", ""),
        ("  ratio", r["scrape_gzip_ratio"], "×",
         f"≤ {SCRAPE_TARGET:g} {verdict(r['scrape_gzip_ratio'] <= SCRAPE_TARGET)}"),
        ("poll floor (List+Alloc+decode)", r["poll_floor_ms"], "ms", ""),
        ("poll steady (podresources)", r["poll_steady_ms"], "ms", ""),
        ("  ratio", r["poll_ratio"], "×",
         f"≤ {POLL_TARGET:g} {verdict(r['poll_ratio'] <= POLL_TARGET)}"),
        ("poll steady (+kubelet HTTPS)", r["poll_steady_with_kubelet_ms"], "ms", "info"),
        ("  ratio", r["poll_with_kubelet_ratio"], "×", "info"),
        ("serve RSS at steady state", r["rss_mib"], "MiB",
         f"≤ {RSS_TARGET_MIB:g} {verdict(r['rss_mib'] <= RSS_TARGET_MIB)}"),
        ("import floor (runtime deps only)", r["import_floor_mib"], "MiB", ""),
        ("  ratio", r["rss_ratio"], "×",
         f"≤ {RSS_FLOOR_TARGET:g} {verdict(r['rss_ratio'] <= RSS_FLOOR_TARGET)}"),
        ("serve RSS peak", r["rss_peak_mib"], "MiB", "info"),
        ("serve RSS, --history.url off", r["rss_no_history_mib"], "MiB", "info"),
        ("where serve's RSS goes:", "", "", ""),
        *((f"  {part}", mib, "MiB", "") for part, mib in r["rss_breakdown_mib"].items()),
        ("serve's mappings:", "", "", ""),
        *((f"  {part.removesuffix('_mib').replace('_', ' ')}", mib, "MiB", "")
          for part, mib in r["rss_maps"].items()),
    ]
    if "scrape_p99_no_history_ms" in r:
        rows += [
            ("--history.url off: /metrics p99", r["scrape_p99_no_history_ms"], "ms", "info"),
            ("  static twin p99", r["static_p99_no_history_ms"], "ms", "info"),
            ("  ratio", r["scrape_ratio_no_history"], "×", "info"),
            ("  gzip: /metrics p99", r["scrape_gzip_p99_no_history_ms"], "ms", "info"),
            ("  gzip: static twin p99", r["static_gzip_p99_no_history_ms"], "ms", "info"),
            ("  gzip: ratio", r["scrape_gzip_ratio_no_history"], "×", "info"),
        ]
    lines = [f"node: {r['pods']} pods, {r['containers']} containers, {r['cpus']} CPUs; "
             f"/metrics body {r['body_bytes']} bytes ({r['body_gzip_bytes']} gzipped); "
             f"{r['scrapes']} scrapes per server and encoding",
             "", f"{'measure':<32} {'value':>10} {'unit':<4} target"]
    lines += [f"{name:<32} {val:>10} {unit:<4} {target}" for name, val, unit, target in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scrape", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--cpus", type=int, default=512)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--scrapers", type=int, default=10)
    parser.add_argument("--requests", type=int, default=30,
                        help="scrapes per scraper per phase")
    parser.add_argument("--phases", type=int, default=10,
                        help="alternating exporter/static phases")
    parser.add_argument("--rounds", type=int, default=30, help="poll cycles measured")
    parser.add_argument("--poll-interval", default="15s",
                        help="serve's --poll.interval during the scrape phases")
    parser.add_argument("--quick", action="store_true",
                        help="skip the informational second serve without history")
    parser.add_argument("--static-server", metavar="BODY_FILE", help=argparse.SUPPRESS)
    parser.add_argument("--sim-server", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    if args.static_server or args.sim_server:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_static_server(args.static_server) if args.static_server else
                        _sim_server(args.sim_server, args.pods, args.cpus, args.seed))
        return 0
    if min(args.pods, args.scrapers, args.requests, args.phases, args.rounds) < 1 \
            or args.cpus < 2:
        parser.error("sizes and counts must be positive (--cpus ≥ 2)")
    workdir = Path(tempfile.mkdtemp(prefix="podres-bench-", dir="/tmp"))
    try:
        result = asyncio.run(run(args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(table(result))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
