"""A synthetic node: N pods on T CPUs, as a kubelet with pod-level resource managers on
would report it.

The mix follows what the exporter is for: pod-level hybrids (an app with exclusive CPUs and
1–3 sidecars in a pod shared pool), legacy padded pods (every sidecar pins a whole core),
and shared pods (nothing exclusive). Exclusive CPUs come from the free pool core by core;
when it runs out, further pods are shared ones. Shared pods take up the container count so
that the node has ``containers_per_pod × N`` containers in total. Deterministic for a seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from exporter.sources.convert import allocatable_to_proto, pods_to_proto
from exporter.sources.fixture import KubeletState
from reconciler.snapshot import (
    Allocatable,
    ContainerAlloc,
    CPUInfo,
    MemoryBlock,
    PodAlloc,
    Topology,
)

GI = 2**30
SIDECAR_NAMES = ("istio-proxy", "fluent-bit", "metrics-exporter")


@dataclass(frozen=True)
class SyntheticNode:
    state: KubeletState
    topology: Topology
    pods: tuple[PodAlloc, ...]
    reserved: frozenset[int]
    kinds: dict[str, int]  # pod kind → count

    @property
    def containers(self) -> int:
        return sum(len(p.containers) for p in self.pods)


def make_topology(cpus: int, *, smt: int = 2) -> Topology:
    """``cpus`` CPUs over 1–2 sockets and 1–4 NUMA nodes, numbered as Linux does on x86:
    the first threads of every core, then their siblings."""
    if cpus < 1:
        raise ValueError("a node needs at least one CPU")
    if cpus % smt:
        smt = 1
    cores = cpus // smt
    sockets = 2 if cores >= 8 and cores % 2 == 0 else 1
    numa = sockets * (2 if cores >= 32 and cores % (sockets * 2) == 0 else 1)
    per_socket, per_numa = cores // sockets, cores // numa
    out = [CPUInfo(t * cores + c, c, c // per_socket, c // per_numa)
           for t in range(smt) for c in range(cores)]
    memory = tuple((n, 256 * GI) for n in range(numa))
    return Topology(tuple(sorted(out, key=lambda c: c.id)), memory)


class _Pool:
    """Free CPUs handed out NUMA-aligned (one node per request, nodes in turn), whole cores
    first, up to ``limit`` CPUs in all so that the node keeps a shared pool."""

    def __init__(self, topology: Topology, reserved: frozenset[int], limit: int) -> None:
        by_core: dict[tuple[int, int], list[int]] = {}
        for c in topology.cpus:
            if c.id not in reserved:
                by_core.setdefault((c.numa_node, c.core), []).append(c.id)
        self.free: dict[int, list[int]] = {}
        for (node, _core), ids in sorted(by_core.items()):
            self.free.setdefault(node, []).extend(sorted(ids))
        self.left = limit
        self.turn = 0

    def take(self, n: int) -> tuple[int, ...] | None:
        if n > self.left:
            return None
        nodes = sorted(self.free)
        for step in range(len(nodes)):
            node = nodes[(self.turn + step) % len(nodes)]
            if len(self.free[node]) >= n:
                taken, self.free[node] = self.free[node][:n], self.free[node][n:]
                self.turn += 1
                self.left -= n
                return tuple(taken)
        return None


def _mem(size: int, node: int = 0) -> tuple[MemoryBlock, ...]:
    return (MemoryBlock("memory", size, (node,)),)


def generate(pods: int, cpus: int, *, seed: int = 1, containers_per_pod: int = 4,
             hybrid_share: float = 0.10, legacy_share: float = 0.05,
             exclusive_share: float = 0.75) -> SyntheticNode:
    rng = random.Random(seed)
    topology = make_topology(cpus)
    numa_of = topology.numa_of()
    # Reserve the first core (both threads) as reservedSystemCPUs would.
    first = topology.cpus[0]
    reserved = frozenset(c.id for c in topology.cpus if (c.core, c.socket) ==
                         (first.core, first.socket))
    pool = _Pool(topology, reserved, int((cpus - len(reserved)) * exclusive_share))
    kinds = {"hybrid": 0, "legacy": 0, "shared": 0}
    plan: list[str] = []
    for _ in range(pods):
        r = rng.random()
        plan.append("hybrid" if r < hybrid_share else
                    "legacy" if r < hybrid_share + legacy_share else "shared")

    built: list[PodAlloc | None] = []
    for index, kind in enumerate(plan):
        namespace = f"team-{index % 37:02d}"
        name = f"{kind}-{index:05d}-{rng.getrandbits(32):08x}"
        sidecars = rng.randint(1, 3)
        app = rng.choice((1, 2, 2, 4))
        pod: PodAlloc | None = None
        if kind == "hybrid":
            block = pool.take(app + 1)
            if block is not None:
                node = numa_of[block[0]]
                containers = tuple(ContainerAlloc(SIDECAR_NAMES[i]) for i in range(sidecars))
                containers += (ContainerAlloc("app", block[:app], _mem(app * 2 * GI, node)),)
                pod = PodAlloc(namespace, name, containers, block,
                               _mem((app * 2 + sidecars) * GI, node))
        elif kind == "legacy":
            cpus_ = pool.take(app + sidecars)
            if cpus_ is not None:
                node = numa_of[cpus_[0]]
                containers = tuple(ContainerAlloc(SIDECAR_NAMES[i], (cpus_[app + i],),
                                                  _mem(GI // 4, node))
                                   for i in range(sidecars))
                containers += (ContainerAlloc("app", cpus_[:app], _mem(app * 2 * GI, node)),)
                pod = PodAlloc(namespace, name, containers)
        if pod is None:
            kind = "shared"
            plan[index] = kind
        kinds[kind] += 1
        built.append(pod)

    # Shared pods make up the container count: at least one container each.
    fixed = sum(len(p.containers) for p in built if p is not None)
    n_shared = sum(1 for p in built if p is None)
    left = max(containers_per_pod * pods - fixed, n_shared)
    result: list[PodAlloc] = []
    seen_shared = 0
    for index, p in enumerate(built):
        if p is None:
            share = left // n_shared + (1 if seen_shared < left % n_shared else 0)
            seen_shared += 1
            names = ["app", *(f"sidecar-{i}" for i in range(1, share))]
            p = PodAlloc(f"team-{index % 37:02d}", f"shared-{index:05d}",
                         tuple(ContainerAlloc(n) for n in names))
        result.append(p)

    allocatable = Allocatable(tuple(sorted(topology.online - reserved)),
                              tuple(MemoryBlock("memory", b, (n,)) for n, b in topology.memory))
    state = KubeletState(pods_to_proto(result), allocatable_to_proto(allocatable),
                         pod_list=pod_list(result), configz=_configz(reserved))
    return SyntheticNode(state, topology, tuple(result), reserved, kinds)


def _resources(cpu: str, memory: str, *, limits: bool = True) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory}
    return {"requests": requests, "limits": dict(requests)} if limits else {
        "requests": requests}


def pod_list(pods: tuple[PodAlloc, ...] | list[PodAlloc]) -> dict[str, Any]:
    """The ``/pods`` body matching the synthetic allocations: hybrids have a pod-level
    budget and burstable sidecars, legacy pods are Guaranteed container by container,
    shared pods are Burstable."""
    items = []
    for p in pods:
        app = next((c for c in p.containers if c.name == "app"), None)
        sidecars = [c for c in p.containers if c.name != "app"]
        app_cpus = len(app.cpu_ids) if app is not None else 0
        spec: dict[str, Any]
        if p.cpu_ids:  # hybrid
            spec = {
                "resources": _resources(str(len(p.cpu_ids)),
                                        f"{(app_cpus * 2 + len(sidecars))}Gi"),
                "initContainers": [{"name": c.name, "restartPolicy": "Always",
                                    "resources": _resources("100m", "128Mi", limits=False)}
                                   for c in sidecars],
                "containers": [{"name": "app",
                                "resources": _resources(str(app_cpus), f"{app_cpus * 2}Gi")}],
            }
        elif app is not None and app.cpu_ids:  # legacy padded
            spec = {
                "initContainers": [{"name": c.name, "restartPolicy": "Always",
                                    "resources": _resources("1", "256Mi")} for c in sidecars],
                "containers": [{"name": "app",
                                "resources": _resources(str(app_cpus), f"{app_cpus * 2}Gi")}],
            }
        else:
            spec = {"containers": [{"name": c.name,
                                    "resources": _resources("100m", "64Mi", limits=False)}
                                   for c in p.containers]}
        items.append({"metadata": {"namespace": p.namespace, "name": p.name,
                                   "uid": f"uid-{p.namespace}-{p.name}"},
                      "spec": spec, "status": {"phase": "Running"}})
    return {"kind": "PodList", "apiVersion": "v1", "items": items}


def _configz(reserved: frozenset[int]) -> dict[str, Any]:
    from reconciler.cpuset import format_cpuset

    return {"kubeletconfig": {
        "cpuManagerPolicy": "static", "memoryManagerPolicy": "Static",
        "topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod",
        "reservedSystemCPUs": format_cpuset(reserved),
        "featureGates": {"PodLevelResources": True, "PodLevelResourceManagers": True},
    }}
