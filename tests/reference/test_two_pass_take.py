"""The kubelet's two-pass take under ``full-pcpus-only`` (docs/design.md#anomalies): with a
merged hint narrower than the request, the real kubelet places half cores, and the
``full_pcpus_violation`` check must not accuse it. Found by the placement-checks property
(tests/allocator/test_placement_checks.py, shape 2x2x2 with 2 NUMA nodes a socket, seed 0)
once the model followed the memory manager's hints."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

from allocator.strategies import random_pod
from allocator.test_placement_checks import _whole_core_pod, _with_caches

from bench.reference import Case, Reference, pod_to_json, setup_request
from exporter.assemble import snapshot_from_raw
from exporter.sim.model_driven import ModelDrivenNode
from reconciler.allocator import CPUTopology, ModelConfig, from_spec
from reconciler.kube import PodSpec
from reconciler.reconcile import reconcile

CONFIG = ModelConfig(memory_policy="Static", topology_policy="best-effort", scope="pod",
                     options=frozenset({"full-pcpus-only"}), reserved_cpu_m=1000)
MiB = 2**20


def _pods() -> list[PodSpec]:
    """The property's seed-0 workload: the first three pods are enough."""
    rng = random.Random(0)
    out = []
    for i in range(rng.randint(1, 16)):
        make = random_pod if rng.random() < 0.5 else _whole_core_pod
        out.append(make(rng, f"p{i}"))
    return [replace(p, uid=p.uid or p.name) for p in out[:3]]


def _topology() -> CPUTopology:
    return _with_caches(from_spec("2x2x2", numa_per_socket=2, memory_per_numa=4 << 30), 1)


def test_the_kubelet_places_half_cores_under_full_pcpus_only(
        need_reference: Callable[[str], None]) -> None:
    need_reference("1.37")
    topo = _topology()
    case = Case(seed=0, topo=topo, config=CONFIG, gates={}, ops=[],
                reserved_memory=tuple((n, 256 * MiB) for n, _ in topo.memory))
    with Reference("1.37") as ref:
        assert ref.request(setup_request(case)).get("ok")
        pods = _pods()
        for p in pods:
            state = ref.request({"op": "admit", "pod": pod_to_json(p)})["state"]
    uid = pods[2].uid
    assert state["containers"][uid] == {"app0": "1-2,4-5"}
    assert [b["numa"] for b in state["memory"][uid]["app0"]] == [[0, 1]]


def test_the_check_does_not_accuse_the_two_pass_take() -> None:
    node = ModelDrivenNode(_topology(), CONFIG)
    for p in _pods():
        node.add(p)
    assert node.model.pods[("default", "p2")].held == frozenset({1, 2, 4, 5})
    snapshot = snapshot_from_raw(node.state().raw(node.model.topo.to_snapshot())).snapshot
    assert not [a for a in reconcile(snapshot).anomalies if a.kind == "full_pcpus_violation"]
    # The same half cores with the memory on every node they touch are still accused.
    held = next(p for p in snapshot.pods if p.name == "p2")
    wide = held._replace(containers=tuple(
        c._replace(memory=tuple(m._replace(numa_nodes=(0, 1, 2)) for m in c.memory))
        for c in held.containers))
    pods = tuple(wide if p is held else p for p in snapshot.pods)
    kinds = {a.kind for a in reconcile(replace(snapshot, pods=pods)).anomalies}
    assert "full_pcpus_violation" in kinds
