"""Allocator-model benchmark: ``python -m bench.model_place [--pods 1000] [--topology 4x64x2]``.

Places a 1000-pod workload (burstable pods, legacy pods with exclusive CPUs, pod-level pods
with a budget, sidecars and a shared pool) on one modelled node as the kubelet would
(topology manager ``single-numa-node``, pod scope, Static memory manager), then renders the
PodResources ``List`` in the 1.37 style and releases every pod.

Floor, measured in the same run: a naive first-fit allocator (lowest free CPU ids, no
topology, no hints) over the same pods: the cheapest placement one could write. Prints a
table and, as its last line, a JSON object with the figures and the ratios to the floor.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable

from reconciler.allocator import ModelConfig, NodeModel, PodPlacement, from_spec
from reconciler.allocator.report import report_pods
from reconciler.kube import ContainerSpec, PodSpec, Resources

GI = 2**30


def _res(cpu_m: int | None, mem: int, *, guaranteed: bool = True) -> Resources:
    if guaranteed:
        return Resources(cpu_m, cpu_m, mem, mem)
    return Resources(cpu_m, None, mem, None)


def workload(n: int, seed: int = 1) -> list[PodSpec]:
    rng = random.Random(seed)
    pods = []
    for i in range(n):
        roll = rng.random()
        name = f"pod-{i}"
        if roll < 0.65:
            containers = tuple(ContainerSpec(f"c{j}", _res(250, GI // 4, guaranteed=False))
                               for j in range(rng.randint(1, 3)))
            pods.append(PodSpec("bench", name, f"uid-{i}", containers))
        elif roll < 0.85:
            side = ContainerSpec("proxy", _res(250, GI // 8), sidecar=True)
            pods.append(PodSpec("bench", name, f"uid-{i}",
                                (ContainerSpec("app", _res(1000, GI)),), (side,)))
        else:
            sides = (ContainerSpec("proxy", sidecar=True), ContainerSpec("logs", sidecar=True))
            pods.append(PodSpec("bench", name, f"uid-{i}",
                                (ContainerSpec("app", _res(1000, GI)),), sides,
                                resources=_res(2000, 2 * GI)))
    return pods


def first_fit(cpus: list[int], pods: list[PodSpec]) -> int:
    """The floor: lowest free ids for every exclusive request, no topology."""
    free = sorted(cpus)
    placed = 0
    for pod in pods:
        need = pod.budget_cpus or sum(c.resources.integer_cpus or 0 for c in pod.long_running
                                      if pod.eligible(c))
        if need <= len(free):
            del free[:need]
            placed += 1
    return placed


def _time(fn: Callable[[], object], rounds: int) -> tuple[float, object]:
    times = []
    result: object = None
    for _ in range(rounds):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--topology", default="4x64x2")
    parser.add_argument("--numa-per-socket", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    topo = from_spec(args.topology, numa_per_socket=args.numa_per_socket)
    config = ModelConfig(scope="pod", topology_policy="single-numa-node", reserved_cpu_m=2000)
    pods = workload(args.pods)
    placed_counts: list[int] = []

    def place() -> NodeModel:
        model = NodeModel(topo, config)
        for pod in pods:
            model.admit(pod)
        placed_counts.append(len(model.pods))
        return model

    floor_ms, _ = _time(lambda: first_fit(sorted(topo.online), pods), args.rounds)
    place_ms, model_obj = _time(place, args.rounds)
    assert isinstance(model_obj, NodeModel)
    model = model_obj
    report_ms, _ = _time(lambda: report_pods(model, "1.37"), args.rounds)

    fresh = place()
    start = time.perf_counter()
    for key in list(fresh.pods):
        fresh.release(*key)
    release_ms = (time.perf_counter() - start) * 1000.0
    assert fresh.free == set(topo.online - fresh.reserved), "release lost CPUs"
    placed = len(model.pods)
    pod_level = sum(1 for p in model.pods.values() if isinstance(p, PodPlacement) and p.block)
    figures = {
        "pods": args.pods, "cpus": len(topo.online), "numa_nodes": len(topo.numa_nodes),
        "placed": placed, "rejected": args.pods - placed, "pod_level_pods": pod_level,
        "floor_ms": round(floor_ms, 3), "place_ms": round(place_ms, 3),
        "per_pod_us": round(place_ms * 1000.0 / args.pods, 1),
        "report_ms": round(report_ms, 3), "release_all_ms": round(release_ms, 3),
        "place_over_floor": round(place_ms / floor_ms, 1) if floor_ms > 0 else None,
    }
    print(f"model placement of {args.pods} pods on a {args.topology} node "
          f"({len(topo.online)} CPUs, {len(topo.numa_nodes)} NUMA nodes)")
    print(f"  placed {placed}, rejected {args.pods - placed}, pod-level {pod_level}")
    print(f"  floor (naive first fit)  {floor_ms:10.2f} ms")
    print(f"  model placement          {place_ms:10.2f} ms  ({figures['per_pod_us']} us/pod, "
          f"{figures['place_over_floor']}x floor)")
    print(f"  List report (1.37)       {report_ms:10.2f} ms")
    print(f"  release every pod        {figures['release_all_ms']:10.2f} ms")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
