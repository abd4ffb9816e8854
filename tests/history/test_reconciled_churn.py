"""Churn through the real reconciler: synthetic PodResources snapshots (pod-level and
legacy pods added, removed, resized, re-assigned) → ``reconcile`` → history; ``history at``
must return exactly the reconciled ledger current at every T."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from backends import History
from histsim import actual_assignments, expected_assignments

from exporter.history import HistoryWriter
from exporter.history import queries as q
from reconciler.ledger import Ledger
from reconciler.reconcile import reconcile
from reconciler.snapshot import (
    Allocatable,
    ContainerAlloc,
    CPUInfo,
    MemoryBlock,
    NodeSnapshot,
    PodAlloc,
    Topology,
)

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
CPUS = 32
TOPOLOGY = Topology(tuple(CPUInfo(i, i % 16, 0, (i % 16) // 8) for i in range(CPUS)),
                    ((0, 64 << 30), (1, 64 << 30)))
ALLOCATABLE = Allocatable(tuple(range(2, CPUS)))


class ReconciledNode:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.pods: list[PodAlloc] = []
        self.n = 0
        for _ in range(6):
            self.add()

    def free(self) -> list[int]:
        used = {c for p in self.pods for c in p.cpu_ids} | {
            c for p in self.pods for k in p.containers for c in k.cpu_ids}
        return [c for c in range(2, CPUS) if c not in used]

    def take(self, n: int) -> tuple[int, ...]:
        free = self.free()
        return tuple(sorted(self.rng.sample(free, n))) if len(free) >= n else ()

    def add(self) -> None:
        self.n += 1
        name = f"pod-{self.n}"
        mem = (MemoryBlock("memory", self.rng.randint(1, 4) << 30, (0,)),)
        if self.rng.random() < 0.5:  # pod-level: a block, one exclusive app, sidecars shared
            block = self.take(3)
            if block:
                self.pods.append(PodAlloc("prod", name, (
                    ContainerAlloc("proxy"), ContainerAlloc("logs"),
                    ContainerAlloc("app", block[:2], mem)), block, mem))
                return
        cpus = self.take(2)
        self.pods.append(PodAlloc("legacy", name, (
            ContainerAlloc("app", cpus[:1], mem if cpus else ()),
            ContainerAlloc("proxy", cpus[1:]))))

    def step(self) -> None:
        roll = self.rng.random()
        if roll < 0.25 or not self.pods:
            self.add()
            return
        i = self.rng.randrange(len(self.pods))
        pod = self.pods[i]
        if roll < 0.45:
            del self.pods[i]
        elif roll < 0.7:  # resize: the app gets a different number of CPUs / memory
            app = pod.containers[-1] if pod.cpu_ids else pod.containers[0]
            extra = self.take(1)
            cpus = app.cpu_ids[:1] if len(app.cpu_ids) > 1 or not extra else \
                app.cpu_ids + extra
            mem = (MemoryBlock("memory", self.rng.randint(1, 4) << 30, (0,)),)
            block = tuple(sorted(set(pod.cpu_ids) | set(cpus))) if pod.cpu_ids else ()
            containers = tuple(ContainerAlloc(c.name, cpus, mem) if c is app else c
                               for c in pod.containers)
            self.pods[i] = PodAlloc(pod.namespace, pod.name, containers, block,
                                    mem if block else ())
        else:  # re-assign: the same pod's containers on other CPUs
            del self.pods[i]
            new = self.take(len({c for k in pod.containers for c in k.cpu_ids}) or 1)
            containers = []
            at = 0
            for k in pod.containers:
                containers.append(ContainerAlloc(k.name, new[at:at + len(k.cpu_ids)],
                                                 k.memory))
                at += len(k.cpu_ids)
            block = new if pod.cpu_ids else ()
            self.pods.insert(i, PodAlloc(pod.namespace, pod.name, tuple(containers),
                                         tuple(sorted(set(block) | set(new[:at])))
                                         if pod.cpu_ids else (), pod.memory))

    def ledger(self) -> Ledger:
        return reconcile(NodeSnapshot(tuple(self.pods), node_name="real", topology=TOPOLOGY,
                                      allocatable=ALLOCATABLE))


async def test_reconciled_churn(history: History) -> None:
    store = history
    node = ReconciledNode(17)
    writer = HistoryWriter(store, "real", summary_interval=30)
    await writer.start()
    timeline: list[tuple[datetime, Any]] = []
    for i in range(80):
        if i:
            node.step()
        ledger = node.ledger()
        t = T0 + timedelta(seconds=10 * i)
        writer.submit(ledger, t)
        timeline.append((t, ledger))
        await asyncio.sleep(0)
    await writer.close()
    assert writer.dropped_writes_total == 0
    for t, ledger in timeline:
        for when in (t, t + timedelta(seconds=9)):
            assert actual_assignments(q.assignments_at(store, when, "real")) == \
                expected_assignments(ledger), when
        anomalies = q.anomalies(store, node="real", window=q.Window(at=t), limit=1000).items
        assert sorted((a["kind"], a["pod"] or "") for a in anomalies) == \
            sorted((a.kind, a.pod or "") for a in ledger.anomalies)
    # NUMA nodes recorded from the topology.
    last = q.assignments_at(store, timeline[-1][0], "real")
    numa = {0: set(range(0, 8)) | set(range(16, 24)), 1: set(range(8, 16)) | set(range(24, 32))}
    for item in last:
        cpus = {int(c) for part in item["cpus"].split(",") if part
                for c in _expand(part)}
        assert item["numa_nodes"] == sorted(n for n, s in numa.items() if cpus & s)


def _expand(part: str) -> range:
    lo, _, hi = part.partition("-")
    return range(int(lo), int(hi or lo) + 1)
