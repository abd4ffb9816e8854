"""Poll-cycle benchmark: ``python -m bench.cycle --pods 1000 --cpus 512 [--rounds N]``.

A synthetic node (bench.synth) is served by the simulated kubelet over a real unix socket.
In one run it measures:

- floor: the ``List`` + ``GetAllocatableResources`` round trip and protobuf decode alone,
  the two calls one after the other (the target's floor); beside it, for information, the
  same with the two calls asked at once as the reader asks them (``gathered_floor_ms``,
  and ``cold_ratio_gathered_floor``: quicker, so the cold cycle's ratio to it is higher);
- cold: ``NodeReader.read()`` on a fresh reader (every pod new): fetch, decode, assemble
  and reconcile (the reader's socket connected and its topology.json read beforehand:
  once-per-process setup, not per-pod work), then what ``serve`` does on a changed ledger
  before a scrape can see it: the exposition rendered, per-pod series on at the default
  cap, and encoded (``render_ms``, its part of the cold figure; the read's decode and
  assembly, ``assemble_ms``, and its reconcile, ``reconcile_ms``, are timed again apart on
  the same raw node, outside the cold figure). The gzip form is made at
  the first compressed scrape after a change, not when publishing: reported apart as
  ``gzip_ms``;
- the reporting pods alone (information, ``reporting_alone_ms``): the same node with only
  the pods that report CPUs or memory (a tenth of the synthetic node's), decoded,
  reconciled and rendered in-process. Over the floor, after the gathered floor's fetch, it
  is a bound on the cold ratio (``cold_ratio_bound``): what the cold cycle would read if
  every other pod cost nothing at all;
- the other pods at their least (information, ``others_least_ms``): the pods that report
  nothing, as a ``List`` answer of their own, decoded by the exporter's wire reader and
  their series written, one join a pod as the exposition writes them, and nothing else (no
  record, no reconcile, no escaping): what any shape of the exporter in Python would still
  spend on them. Added to the bound's, it gives ``cold_ratio_least``: the cold ratio if
  those pods cost only that;
- steady: ``NodeReader.read()`` again with nothing changed;
- kernel: the kernel sources of the same steady poll (docs/kernel.md): every container's
  cpuset from a cgroup tree matching the ledger and ``/proc/stat``, through
  ``KernelObserver.poll`` as ``serve`` calls it (``/pods`` unchanged, so the match of pods
  to cgroups is not redone); reported as ``kernel_ms``, its ratio to the floor, and
  ``steady_with_kernel_ratio``.

The headline figures use the floor's sources (PodResources), so the ratios are the
exporter's own cost over the unavoidable fetch. Unless ``--no-kubelet``, the same cycle is
measured again with the kubelet's HTTPS endpoint (``/pods``, ``/configz``) as a further
source: reported under ``with_kubelet``. That run has a floor of its own, measured in the
same rounds: ``List`` + ``GetAllocatableResources`` + ``GET /pods`` + ``GET /configz`` over
the simulator's HTTPS server and the decode of all four bodies (protobuf and JSON), reported
as ``kubelet_floor_ms`` with the steady and cold ratios to it. The synthetic ``/pods`` is
sized like a kubelet's (``pods_bytes``).

The process runs with the daemon's garbage-collector, TLS read-buffer and allocator
settings (``exporter.runtime.tune_gc``, ``shrink_tls_read_buffer`` and
``fix_mmap_threshold``, applied by ``serve``).
Medians over the rounds, and the least of each (the table's "min ms"). The floor is
measured in every round on both sides of its cold cycle (two samples before, one after).
The ratios with a target are **minimum over minimum**: each side's least disturbed
sample. On the shared 2-core machine the ratio of medians moved with the load by a factor
of two (2.9–8.0× for one commit), and so did the median of ratios paired round by round
(2.9–6.2×): the floor is a socket round trip between threads, whose wake-ups a busy
machine delays far more, in proportion, than it slows the cycle's Python, so a busy
round's floor grows more than its cycle and the ratio falls with load. The ratio of minima
moved by 6% over the same runs (docs/performance.md, issue 33's fourth pass). Both others
are printed for information (``cold_ratio_of_medians``, ``cold_ratio_paired``). Prints a
table and, as its last line, one JSON object with the figures and the ratios to the
floor.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.kernel_read import write_tree
from bench.synth import SyntheticNode, generate
from exporter.assemble import snapshot_from_raw
from exporter.kernel import KernelObserver, KernelOptions
from exporter.metrics.compression import GzipPrefix
from exporter.metrics.exposition import node_exposition
from exporter.options import PollOptions
from exporter.rawnode import RawNode
from exporter.reader import NodeReader, SourceOptions
from exporter.runtime import fix_mmap_threshold, shrink_tls_read_buffer, tune_gc
from exporter.sim.cgroupfs import ProcStatWriter, decorate_pod_list
from exporter.sim.server import SimKubelet
from exporter.sources.convert import pods_from_wire, pods_to_proto
from exporter.sources.kubelet import KubeletClient
from exporter.sources.podresources import (
    PodResourcesClient,
    decode_allocatable_message,
    decode_list,
)
from exporter.sources.topology import topology_to_json
from reconciler.ledger import PodEntries
from reconciler.reconcile import reconcile
from reconciler.snapshot import PodAlloc

STEADY_TARGET = 2.0
COLD_TARGET = 5.0
KUBELET_STEADY_TARGET = 1.5
KUBELET_COLD_TARGET = 5.0


async def _timed(fn: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await fn()
    return (time.perf_counter() - start) * 1000.0


def _publish(ledger: Any) -> tuple[float, float, int]:
    """What ``serve`` does with a changed ledger, as ``PublishedState.publish`` does it: the
    exposition rendered (per-pod collector on, its default cap) and encoded, in ms; the
    gzip form made at the first compressed scrape, in ms; the body's size."""
    start = time.perf_counter()
    body, _, _ = node_exposition(ledger, pods_max_series=PollOptions().pods_max_series)
    rendered = time.perf_counter()
    GzipPrefix(body)
    return ((rendered - start) * 1000.0, (time.perf_counter() - rendered) * 1000.0,
            len(body))


def _stages(raw: Any, node_name: str) -> tuple[float, float]:
    """The cold read's own work split in two, measured apart on the raw node it read (the
    cold figure is not changed by it): decode and assembly (``snapshot_from_raw``), then
    ``reconcile``, in ms."""
    start = time.perf_counter()
    snapshot = snapshot_from_raw(raw, node_name).snapshot
    assembled = time.perf_counter()
    reconcile(snapshot)
    return (assembled - start) * 1000.0, (time.perf_counter() - assembled) * 1000.0


def _podresources_raw(node: SyntheticNode) -> RawNode:
    """The node's PodResources answers and topology, without the kubelet's HTTPS bodies."""
    return replace(node.state.raw(node.topology), pods=None, configz=None)


def reporting(node: SyntheticNode) -> list[PodAlloc]:
    """The pods that report CPUs or memory, at pod or container level: those the reconciler
    works through one by one (``PodEntries.holding`` of the node's ledger)."""
    entries = reconcile(snapshot_from_raw(_podresources_raw(node), "bench").snapshot).pods
    assert isinstance(entries, PodEntries)  # what reconcile builds
    return [node.pods[i] for i in entries.holding]


def reporting_alone(node: SyntheticNode, pods: list[PodAlloc]) -> RawNode:
    """The node's PodResources answers with only ``pods`` listed."""
    return replace(_podresources_raw(node),
                   list_response=pods_to_proto(pods).SerializeToString())


def _own_work(raw: RawNode, node_name: str) -> float:
    """A raw node's decode, assembly, reconcile and rendered exposition, in ms."""
    start = time.perf_counter()
    ledger = reconcile(snapshot_from_raw(raw, node_name).snapshot)
    node_exposition(ledger, pods_max_series=PollOptions().pods_max_series)
    return (time.perf_counter() - start) * 1000.0


def others(node: SyntheticNode, pods: list[PodAlloc]) -> bytes:
    """The node's ``List`` answer with every pod but ``pods``."""
    held = set(map(id, pods))
    return pods_to_proto([p for p in node.pods if id(p) not in held]).SerializeToString()


def others_lines(list_response: bytes) -> str:
    """The series of pods that report nothing, at the least: their ``List`` answer decoded
    by the exporter's wire reader, and each one's containers' ``node_shared`` lines written
    as the exposition writes them (the common start joined with what follows the pod name,
    made once per distinct containers tuple). No record, no reconcile, no escaping: a bound
    for any Python shape of the exporter, not a way to run it."""
    out: list[str] = []
    add = out.append
    tails: dict[int, list[str]] = {}
    for namespace, pod, containers, _, _ in pods_from_wire(list_response):
        tail = tails.get(id(containers))  # held by the decoded pods meanwhile
        if tail is None:
            tail = tails[id(containers)] = ["", *(
                f'",container="{c.name}",assignment="node_shared"}} 0\n' for c in containers)]
        add(f'podres_container_cpus{{namespace="{namespace}",pod="{pod}'.join(tail))
    return "".join(out)


def _others_least(list_response: bytes) -> float:
    """``others_lines``, in ms."""
    start = time.perf_counter()
    others_lines(list_response)
    return (time.perf_counter() - start) * 1000.0


def cold_bound(parts: list[list[float]], floors: list[float]) -> float:
    """The least the cold ratio could be if the cycle were only ``parts`` one after the
    other: the sum of their minima over the target's floor's (a sum of minima is at most
    the minimum of the sums). The bound: the reporting pods' own work and the quickest
    fetch of both answers (the gathered floor); with the other pods' least work added, the
    least the cold ratio could be in any Python shape of the exporter."""
    return round(sum(map(min, parts)) / min(floors), 2)


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def ratio_of_minima(values: list[float], floors: list[float]) -> float:
    """The least disturbed sample of each side, one over the other: the target's ratio."""
    return round(min(values) / min(floors), 2)


def paired_ratio(values: list[float], floors: list[float]) -> float:
    """The median of each sample's ratio to the floor measured beside it (its round's)."""
    return round(statistics.median(v / f for v, f in zip(values, floors, strict=True)), 2)


def _spread(values: list[float]) -> list[float]:
    return [round(min(values), 3), round(max(values), 3)]


class _Kernel:
    """The kernel files of the synthetic node and the observer ``serve`` would run."""

    def __init__(self, node: SyntheticNode, workdir: Path) -> None:
        assert node.state.pod_list is not None
        self.pod_list = decorate_pod_list(node.state.pod_list)
        self.configz = node.state.configz
        self.workdir = workdir
        self.stat: ProcStatWriter | None = None
        self.observer = KernelObserver(KernelOptions(
            str(workdir / "cgroup"), "auto", str(workdir / "proc"), user_hz=100))

    def poll(self, ledger: Any) -> float:
        """One poll's kernel reads and checks, in ms; the tree is written on first use."""
        if self.stat is None:
            write_tree(self.workdir / "cgroup", ledger, self.pod_list)
            self.stat = ProcStatWriter(self.workdir / "proc" / "stat",
                                       range(len(ledger.cpu_map)), user_hz=100)
        self.stat.advance(1.0, dict.fromkeys(self.stat.cpus, 0.5))
        start = time.perf_counter()
        report = self.observer.poll(ledger, self.pod_list, self.configz, time.monotonic())
        elapsed = (time.perf_counter() - start) * 1000.0
        assert not report.errors and report.cgroup_off is None, (report.errors,
                                                                 report.cgroup_off)
        return elapsed


async def _cycles(options: SourceOptions, rounds: int,
                  floors: dict[str, Callable[[], Awaitable[None]]],
                  kernel: _Kernel | None = None, alone: RawNode | None = None,
                  rest: bytes | None = None) -> dict[str, Any]:
    """Cold and steady ``NodeReader.read()`` figures for one set of sources, with the floors
    measured in the same rounds (interleaved, so that a machine busy with something else
    for a while weighs on both sides of the ratio alike)."""
    warm = NodeReader(options)
    try:
        await warm.read()
    finally:
        await warm.close()
    floor_ms: dict[str, list[float]] = {name: [] for name in floors}
    paired_floor: dict[str, list[float]] = {name: [] for name in floors}
    cold: list[float] = []
    render: list[float] = []
    assemble: list[float] = []
    reconciled: list[float] = []
    gzip: list[float] = []
    alone_ms: list[float] = []
    least_ms: list[float] = []
    body_bytes = 0
    steady: list[float] = []
    steady_floor: list[float] = []  # the round's floor beside each steady read
    first = next(iter(floors))
    kernel_ms: list[float] = []
    unchanged = True
    ledger = None
    for _ in range(rounds):
        # One reader at a time, and a collected heap before each: every round starts from
        # the same state (readers kept alive would make each GC pass slower than the last).
        gc.collect()
        reader = NodeReader(options)
        try:
            # Connect and read the topology first: the cold figure is the work of a node
            # full of new pods, not once-per-process setup (dialling the socket, a TLS
            # handshake, reading topology.json — which does not change with the pods).
            await reader.podresources.list_raw()
            if reader.kubelet is not None:
                await reader.kubelet.fetch("/configz")
            if reader.topology is not None:
                reader.topology.read()
            # The round's floor is taken on both sides of its cold cycle (two samples
            # before, one after) and the cold figure is compared with it alone: a ratio of
            # two figures measured a few milliseconds apart, which a machine busy with
            # something else for a while weighs on alike (docs/performance.md#the-poll).
            round_floor: dict[str, list[float]] = {name: [] for name in floors}
            for _ in range(2):
                for name, floor_once in floors.items():
                    round_floor[name].append(await _timed(floor_once))
            start = time.perf_counter()
            reading = await reader.read()
            read_ms = (time.perf_counter() - start) * 1000.0
            render_ms, gzip_ms, body_bytes = _publish(reading.ledger)
            for name, floor_once in floors.items():
                round_floor[name].append(await _timed(floor_once))
            for name, samples in round_floor.items():
                floor_ms[name] += samples
                paired_floor[name].append(statistics.median(samples))
            cold.append(read_ms + render_ms)
            render.append(render_ms)
            assemble_ms, reconcile_ms = _stages(reading.raw, options.node_name)
            assemble.append(assemble_ms)
            reconciled.append(reconcile_ms)
            gzip.append(gzip_ms)
            if alone is not None:
                alone_ms.append(_own_work(alone, options.node_name))
            if rest is not None:
                least_ms.append(_others_least(rest))
            for _ in range(3):
                start = time.perf_counter()
                reading = await reader.read()
                steady.append((time.perf_counter() - start) * 1000.0)
                steady_floor.append(paired_floor[first][-1])
                unchanged = unchanged and not reading.changed
                if kernel is not None:
                    kernel_ms.append(kernel.poll(reading.ledger))
            ledger = reading.ledger
        finally:
            await reader.close()
    assert ledger is not None
    paired = {f"{name}_paired": samples for name, samples in paired_floor.items()}
    return {**floor_ms, **paired, "steady_floor": steady_floor, "cold": cold,
            "render": render, "assemble": assemble, "reconcile": reconciled, "gzip": gzip,
            "alone": alone_ms, "least": least_ms,
            "exposition_bytes": body_bytes, "steady": steady, "kernel": kernel_ms,
            "unchanged": unchanged,
            "ledger_pods": len(ledger.pods), "ledger_containers": len(ledger.containers)}


def _decode(list_raw: bytes, alloc_raw: bytes | None) -> None:
    """Protobuf's decode of the two PodResources answers: every floor's share of work."""
    decode_list(list_raw)
    if alloc_raw is not None:
        decode_allocatable_message(alloc_raw)


async def measure(node: SyntheticNode, *, rounds: int, kubelet: bool, workdir: Path
                  ) -> dict[str, Any]:
    socket_path = str(workdir / "kubelet.sock")
    topology_file = workdir / "topology.json"
    topology_file.write_text(json.dumps(topology_to_json(node.topology)))
    sim = SimKubelet(node.state, socket_path=socket_path,
                     http_listen="127.0.0.1:0" if kubelet else None)
    await sim.start()
    client = PodResourcesClient(socket_path)
    kubelet_client = KubeletClient(sim.http_url, token_file=None,
                                   ca_file=str(sim.cert_path)) if sim.http_url else None
    try:
        async def floor_once() -> None:
            list_raw = await client.list_raw()
            alloc_raw = await client.allocatable_raw()
            _decode(list_raw, alloc_raw)

        async def gathered_floor_once() -> None:
            # The same two calls asked at once, as the reader asks them (exporter/fetch.py).
            list_raw, alloc_raw = await asyncio.gather(client.list_raw(),
                                                       client.allocatable_raw())
            _decode(list_raw, alloc_raw)

        async def kubelet_floor_once() -> None:
            assert kubelet_client is not None
            list_raw, alloc_raw, pods, configz = await asyncio.gather(
                client.list_raw(), client.allocatable_raw(),
                kubelet_client.fetch("/pods"), kubelet_client.fetch("/configz"))
            _decode(list_raw, alloc_raw)
            json.loads(pods)
            json.loads(configz)

        for _ in range(5):  # warm the channel, the simulator and the interpreter
            await floor_once()
            if kubelet_client is not None:
                await kubelet_floor_once()
        base = SourceOptions(socket=socket_path, token_file=None, sysfs=None,
                             topology_file=str(topology_file), node_name="bench")
        reporting_pods = reporting(node)
        main = await _cycles(base, rounds, {"floor": floor_once,
                                            "gathered_floor": gathered_floor_once},
                             _Kernel(node, workdir), reporting_alone(node, reporting_pods),
                             others(node, reporting_pods))
        extra = None
        if kubelet:
            extra = await _cycles(replace(base, kubelet_url=sim.http_url,
                                          ca_file=str(sim.cert_path)), rounds,
                                  {"floor": floor_once, "kubelet_floor": kubelet_floor_once})
    finally:
        await client.close()
        if kubelet_client is not None:
            await kubelet_client.close()
        await sim.stop()

    floor = main["floor"]
    floor_ms = _median(floor)
    result: dict[str, Any] = {
        "pods": len(node.pods),
        "containers": node.containers,
        "cpus": len(node.topology.cpus),
        "floor_ms": floor_ms,
        "steady_ms": _median(main["steady"]),
        "cold_ms": _median(main["cold"]),
        "steady_ratio": ratio_of_minima(main["steady"], floor),
        "cold_ratio": ratio_of_minima(main["cold"], floor),
        # For information, the ratios that move with the machine's load: each round's
        # paired (the median of its rounds'), and median over median (printed as the
        # target's ratio before issue 33's fourth pass).
        "steady_ratio_paired": paired_ratio(main["steady"], main["steady_floor"]),
        "cold_ratio_paired": paired_ratio(main["cold"], main["floor_paired"]),
        "cold_ratio_of_medians": round(_median(main["cold"]) / floor_ms, 2),
        # For information: the floor with its two calls asked at once, as the reader asks
        # them, and the cold cycle over it (minimum over minimum): the target's floor asks
        # them one after the other, which takes longer and flatters the ratio.
        "gathered_floor_ms": _median(main["gathered_floor"]),
        "cold_ratio_gathered_floor": ratio_of_minima(main["cold"], main["gathered_floor"]),
        # For information: the reporting pods' own work alone, and the cold ratio it bounds.
        "reporting_pods": len(reporting_pods),
        "reporting_alone_ms": _median(main["alone"]),
        "cold_ratio_bound": cold_bound([main["alone"], main["gathered_floor"]], floor),
        # And with the other pods at their least: the cold ratio's floor in Python.
        "others_least_ms": _median(main["least"]),
        "cold_ratio_least": cold_bound([main["alone"], main["least"],
                                        main["gathered_floor"]], floor),
        "render_ms": _median(main["render"]),
        "assemble_ms": _median(main["assemble"]),
        "reconcile_ms": _median(main["reconcile"]),
        "gzip_ms": _median(main["gzip"]),
        "exposition_bytes": main["exposition_bytes"],
        "kernel_ms": _median(main["kernel"]),
        "kernel_ratio": round(_median(main["kernel"]) / floor_ms, 2),
        "steady_with_kernel_ratio": round(
            (_median(main["steady"]) + _median(main["kernel"])) / floor_ms, 2),
        "rounds": rounds,
        "list_bytes": len(node.state.list_response.SerializeToString()),
        "pods_bytes": len(node.state.raw().pods or b""),
        "steady_unchanged": main["unchanged"],
        "ledger_pods": main["ledger_pods"],
        "ledger_containers": main["ledger_containers"],
        "kinds": node.kinds,
        "spread_ms": {"floor": _spread(floor),
                      "gathered_floor": _spread(main["gathered_floor"]),
                      "steady": _spread(main["steady"]),
                      "cold": _spread(main["cold"]), "render": _spread(main["render"]),
                      "assemble": _spread(main["assemble"]),
                      "reconcile": _spread(main["reconcile"]),
                      "gzip": _spread(main["gzip"]), "kernel": _spread(main["kernel"]),
                      "reporting_alone": _spread(main["alone"]),
                      "others_least": _spread(main["least"])},
    }
    if extra is not None:
        extra_floor = _median(extra["floor"])
        kubelet_floor = _median(extra["kubelet_floor"])
        result["with_kubelet"] = {
            "floor_ms": extra_floor,
            "steady_ms": _median(extra["steady"]), "cold_ms": _median(extra["cold"]),
            "steady_ratio": ratio_of_minima(extra["steady"], extra["floor"]),
            "cold_ratio": ratio_of_minima(extra["cold"], extra["floor"]),
            "kubelet_floor_ms": kubelet_floor,
            "steady_kubelet_ratio": ratio_of_minima(extra["steady"], extra["kubelet_floor"]),
            "cold_kubelet_ratio": ratio_of_minima(extra["cold"], extra["kubelet_floor"]),
            "cold_kubelet_ratio_paired": paired_ratio(extra["cold"],
                                                      extra["kubelet_floor_paired"]),
            "steady_unchanged": extra["unchanged"],
            "spread_ms": {"steady": _spread(extra["steady"]), "cold": _spread(extra["cold"]),
                          "kubelet_floor": _spread(extra["kubelet_floor"])},
        }
    return result


def _table(result: dict[str, Any]) -> str:
    kinds = ", ".join(f"{v} {k}" for k, v in result["kinds"].items())
    lines = [
        f"node: {result['pods']} pods ({kinds}), {result['containers']} containers, "
        f"{result['cpus']} CPUs; List response {result['list_bytes']} bytes, exposition "
        f"{result['exposition_bytes']} bytes, /pods "
        f"{result['pods_bytes']} bytes; {result['rounds']} rounds",
        "",
        f"{'measure':<24} {'median ms':>10} {'min ms':>9} {'max ms':>9} {'× floor':>8} "
        f"{'target':>10}",
    ]
    # (label, figures, measure, the floor it is a ratio to, target)
    rows: list[tuple[str, dict[str, Any], str, str, float | None]] = [
        ("floor", result, "floor", "floor", None),
        ("floor, calls gathered", result, "gathered_floor", "floor", None),
        ("steady", result, "steady", "floor", STEADY_TARGET),
        ("cold", result, "cold", "floor", COLD_TARGET),
        ("  of which render", result, "render", "floor", None),
        ("  assemble (apart)", result, "assemble", "floor", None),
        ("  reconcile (apart)", result, "reconcile", "floor", None),
        ("reporting pods alone", result, "reporting_alone", "floor", None),
        ("other pods at least", result, "others_least", "floor", None),
        ("gzip (1st gzip scrape)", result, "gzip", "floor", None),
        ("kernel (cgroup, stat)", result, "kernel", "floor", None),
    ]
    if "with_kubelet" in result:
        kubelet = result["with_kubelet"]
        rows += [("steady +kubelet HTTPS", kubelet, "steady", "floor", None),
                 ("cold +kubelet HTTPS", kubelet, "cold", "floor", None),
                 ("kubelet floor", kubelet, "kubelet_floor", "kubelet_floor", None),
                 ("steady × kubelet floor", kubelet, "steady", "kubelet_floor",
                  KUBELET_STEADY_TARGET),
                 ("cold × kubelet floor", kubelet, "cold", "kubelet_floor",
                  KUBELET_COLD_TARGET)]
    # The ratios with a target are minimum over minimum (``ratio_of_minima``), not this
    # table's median over median.
    headline = {("steady", "floor"): "steady_ratio", ("cold", "floor"): "cold_ratio",
              ("steady", "kubelet_floor"): "steady_kubelet_ratio",
              ("cold", "kubelet_floor"): "cold_kubelet_ratio"}
    for label, figures, key, floor, target in rows:
        ms = figures[f"{key}_ms"]
        name = headline.get((key, floor))
        ratio = figures[name] if name else ms / figures[f"{floor}_ms"]
        lo, hi = figures["spread_ms"][key]
        verdict = "" if target is None else (f"≤{target:g}× " +
                                             ("ok" if ratio <= target else "OVER"))
        lines.append(f"{label:<24} {ms:>10.2f} {lo:>9.2f} {hi:>9.2f} {ratio:>8.2f} "
                     f"{verdict:>10}")
    lines.append(f"cold × floor: {result['cold_ratio']:.2f} minimum over minimum (the "
                 f"target's), {result['cold_ratio_of_medians']:.2f} median over median, "
                 f"{result['cold_ratio_paired']:.2f} paired round by round; "
                 f"{result['cold_ratio_gathered_floor']:.2f} over the floor with its two "
                 "calls gathered, as the reader asks them (minimum over minimum); at "
                 f"least {result['cold_ratio_bound']:.2f} if only the "
                 f"{result['reporting_pods']} pods that report CPUs or memory cost anything "
                 "(their own work after the gathered fetch, over the floor); at least "
                 f"{result['cold_ratio_least']:.2f} if the other "
                 f"{result['pods'] - result['reporting_pods']} cost only their decode and "
                 "their lines")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cycle", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--cpus", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--containers-per-pod", type=int, default=4)
    parser.add_argument("--no-kubelet", dest="kubelet", action="store_false",
                        help="skip the cycle with the kubelet's HTTPS endpoint")
    args = parser.parse_args(argv)
    if args.pods < 1 or args.cpus < 2 or args.rounds < 1:
        parser.error("need --pods ≥ 1, --cpus ≥ 2 and --rounds ≥ 1")
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    node = generate(args.pods, args.cpus, seed=args.seed,
                    containers_per_pod=args.containers_per_pod)
    workdir = Path(tempfile.mkdtemp(prefix="podres-bench-", dir="/tmp"))
    tune_gc()
    shrink_tls_read_buffer()
    fix_mmap_threshold()
    try:
        result = asyncio.run(measure(node, rounds=args.rounds, kubelet=args.kubelet,
                                     workdir=workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(_table(result))
    print(json.dumps(result, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
