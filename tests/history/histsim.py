"""A simulated node for the history tests: a deterministic random walk of pods being added,
removed, resized and re-assigned, producing ledgers (built directly, no reconciler)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from reconciler.cpuset import format_cpuset
from reconciler.ledger import (
    Anomaly,
    ContainerEntry,
    CPUCell,
    Ledger,
    PodEntry,
    PoolCounts,
)

HOSTILE = ["o'brien", 'say "hi"', "x; DROP TABLE nodes;--", "100%_done", "back\\slash",
           "ünïcødé-名前", "a" * 253]


@dataclass
class SimContainer:
    name: str
    sidecar: bool
    assignment: str
    cpus: frozenset[int]
    memory: int


@dataclass
class SimPod:
    namespace: str
    name: str
    uid: str
    containers: list[SimContainer] = field(default_factory=list)


class SimNode:
    def __init__(self, name: str, seed: int, cpus: int = 64, pods: int = 10,
                 hostile: bool = False) -> None:
        self.name = name
        self.rng = random.Random(seed)
        self.ncpus = cpus
        self.hostile = hostile
        self.pods: list[SimPod] = []
        self.anomalies: list[Anomaly] = []
        self.counter = 0
        for _ in range(pods):
            self.add_pod()

    def free_cpus(self) -> list[int]:
        used = {c for p in self.pods for k in p.containers for c in k.cpus}
        return [c for c in range(self.ncpus) if c not in used]

    def take(self, n: int) -> frozenset[int]:
        free = self.free_cpus()
        if len(free) < n:
            return frozenset()
        return frozenset(self.rng.sample(free, n))

    def add_pod(self) -> None:
        self.counter += 1
        ns = self.rng.choice(["default", "prod", "batch"])
        name = f"pod-{self.counter}"
        if self.hostile and self.rng.random() < 0.5:
            name = f"{self.rng.choice(HOSTILE)}-{self.counter}"[:253]
        pod = SimPod(ns, name, f"uid-{self.name}-{self.counter}")
        for i in range(self.rng.randint(1, 3)):
            kind = self.rng.choice(["pod_exclusive", "pod_shared", "node_exclusive",
                                    "node_shared"])
            cpus = self.take(self.rng.randint(1, 3)) if kind.endswith("exclusive") else \
                frozenset()
            pod.containers.append(SimContainer(
                f"c{i}", i == 0 and self.rng.random() < 0.3, kind, cpus,
                self.rng.randint(1, 8) << 28))
        self.pods.append(pod)

    def step(self) -> str:
        """One change (or none); returns what happened."""
        roll = self.rng.random()
        if roll < 0.15 or not self.pods:
            self.add_pod()
            return "add"
        pod = self.rng.choice(self.pods)
        if roll < 0.3:
            self.pods.remove(pod)
            return "remove"
        c = self.rng.choice(pod.containers)
        if roll < 0.45:
            c.memory = self.rng.randint(1, 8) << 28
            if c.cpus:
                grown = self.take(1)
                c.cpus = c.cpus | grown if self.rng.random() < 0.5 else \
                    frozenset(sorted(c.cpus)[:1])
            return "resize"
        if roll < 0.6:
            c.assignment = self.rng.choice(["pod_exclusive", "pod_shared"])
            old = c.cpus
            c.cpus = frozenset()
            c.cpus = self.take(len(old) or 1) if c.assignment == "pod_exclusive" else \
                frozenset()
            return "reassign"
        if roll < 0.7:
            if self.anomalies and self.rng.random() < 0.5:
                self.anomalies.pop(self.rng.randrange(len(self.anomalies)))
            else:
                self.anomalies.append(Anomaly(
                    self.rng.choice(["exclusive_overlap", "unknown_cpu"]), pod.namespace,
                    pod.name, self.rng.choice([None, c.name]),
                    f"detail {self.rng.randint(0, 5)}"))
            return "anomaly"
        return "none"

    def ledger(self) -> Ledger:
        containers = []
        pods = []
        for p in self.pods:
            block: frozenset[int] = frozenset()
            for k in p.containers:
                containers.append(ContainerEntry(
                    p.namespace, p.name, k.name, k.sidecar, k.assignment,  # type: ignore[arg-type]
                    k.assignment, k.cpus, k.memory))  # type: ignore[arg-type]
                block |= k.cpus
            pods.append(PodEntry(p.namespace, p.name, block, None, len(block), 0, 0, 0, None,
                                 None, "podresources", uid=p.uid))
        used = sum(len(k.cpus) for p in self.pods for k in p.containers)
        cells = tuple(CPUCell(i, "node_shared", numa_node=i * 2 // self.ncpus)
                      for i in range(self.ncpus))
        return Ledger(
            node_name=self.name, online_cpus=self.ncpus, numa_nodes=2, kubelet=(),
            cpu_pools=PoolCounts(node_shared=self.ncpus - used, pod_exclusive=used),
            cpu_pools_by_numa=(), memory_pools=(), pods=tuple(pods),
            containers=tuple(containers), reclaimed_cpus=0, reclaimable_cpus=0,
            anomalies=tuple(self.anomalies), cpu_map=cells)


def expected_assignments(ledger: Ledger) -> set[tuple[Any, ...]]:
    """What ``history at`` must return for a ledger: one tuple per container."""
    seen: set[tuple[str, str, str]] = set()
    out = set()
    for c in ledger.containers:
        key = (c.namespace, c.pod, c.name)
        if key in seen:
            continue
        seen.add(key)
        out.add((c.namespace, c.pod, c.name, c.assignment, format_cpuset(c.cpus),
                 len(c.cpus), c.memory_bytes))
    return out


def actual_assignments(items: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    return {(i["namespace"], i["pod"], i["container"], i["assignment"], i["cpus"],
             i["cpu_count"], i["memory_bytes"]) for i in items}
