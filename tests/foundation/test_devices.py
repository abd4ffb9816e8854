"""Devices in the ledger (docs/design.md#devices): per container, per resource and NUMA
node, and ``device_numa_misaligned`` judged by the topology manager policy."""

from __future__ import annotations

import json
from dataclasses import replace

from foundation.helpers import GI, check_invariants, mem, pod, topology
from reconciler.devices import MAX_RESOURCES, DeviceCount
from reconciler.kube import KubeletConfig
from reconciler.ledger import Ledger
from reconciler.reconcile import reconcile
from reconciler.snapshot import (
    Allocatable,
    ClaimDevice,
    ContainerAlloc,
    DeviceAlloc,
    MemoryBlock,
    NodeSnapshot,
    PodAlloc,
)

TWO_NUMA = topology(16, numa=2, sockets=2)  # 0-7 on node 0, 8-15 on node 1
GPU = "nvidia.com/gpu"
# Four GPUs, two on each NUMA node; one SR-IOV VF without topology.
ALLOCATABLE = Allocatable(
    cpu_ids=tuple(range(1, 16)),
    devices=(DeviceAlloc(GPU, ("GPU-0",), (0,)), DeviceAlloc(GPU, ("GPU-1",), (0,)),
             DeviceAlloc(GPU, ("GPU-2",), (1,)), DeviceAlloc(GPU, ("GPU-3",), (1,)),
             DeviceAlloc("intel.com/sriov", ("vf-0",)),
             DeviceAlloc("intel.com/sriov", ("vf-1",))))


def config(policy: str, scope: str = "container") -> KubeletConfig:
    return KubeletConfig(cpu_manager_policy="static", memory_manager_policy="Static",
                         topology_manager_policy=policy, topology_manager_scope=scope)


def gpu(*ids: str, numa: int | None = None, resource: str = GPU) -> DeviceAlloc:
    return DeviceAlloc(resource, ids, () if numa is None else (numa,))


def ctr(name: str, cpus: tuple[int, ...] = (), memory: tuple[MemoryBlock, ...] = (),
        devices: tuple[DeviceAlloc, ...] = (), dynamic: tuple[ClaimDevice, ...] = ()
        ) -> ContainerAlloc:
    return ContainerAlloc(name, cpus, memory, devices, dynamic)


def run(*pods: PodAlloc, policy: str = "best-effort", scope: str = "container",
        allocatable: Allocatable = ALLOCATABLE) -> Ledger:
    ledger = reconcile(NodeSnapshot(pods=pods, allocatable=allocatable, topology=TWO_NUMA,
                                    kubelet_config=config(policy, scope)))
    check_invariants(ledger, TWO_NUMA)
    return ledger


def misaligned(ledger: Ledger) -> list[tuple[str | None, str | None]]:
    return [(a.pod, a.container) for a in ledger.anomalies
            if a.kind == "device_numa_misaligned"]


# The acceptance case: exclusive CPUs on NUMA 0, its GPU on NUMA 1.
TRAINER = pod("trainer", ctr("train", (2, 3), devices=(gpu("GPU-2", numa=1),)),
              ctr("proxy"))


def test_cpus_on_one_node_gpu_on_the_other_under_best_effort() -> None:
    ledger = run(TRAINER)
    assert misaligned(ledger) == [("trainer", "train")]
    detail = next(a.detail for a in ledger.anomalies if a.kind == "device_numa_misaligned")
    assert "2-3" in detail and "NUMA node(s) 0" in detail and "best-effort" in detail
    assert "nvidia.com/gpu" in detail
    assert ledger.anomaly_counts()["device_numa_misaligned"] == 1
    assert ledger.to_json()["anomalies"][0]["kind"] == "device_numa_misaligned"


def test_under_none_too() -> None:
    assert misaligned(run(TRAINER, policy="none")) == [("trainer", "train")]


def test_never_under_single_numa_node_or_restricted() -> None:
    for policy in ("single-numa-node", "restricted", "Restricted"):
        assert misaligned(run(TRAINER, policy=policy)) == []


def test_devices_without_topology_are_never_judged() -> None:
    vf = pod("net", ctr("app", (2, 3), devices=(gpu("vf-0", resource="intel.com/sriov"),)))
    assert misaligned(run(vf)) == []


def test_aligned_and_partly_covered_containers() -> None:
    aligned = pod("a", ctr("app", (2, 3), memory=(mem(GI, "memory", 0),),
                           devices=(gpu("GPU-0", numa=0),)))
    # CPUs on both nodes, one GPU on each: every node with CPUs has a device.
    wide = pod("w", ctr("app", (4, 5, 8, 9), devices=(gpu("GPU-1", numa=0),
                                                      gpu("GPU-3", numa=1))))
    assert misaligned(run(aligned, wide)) == []
    # CPUs on both nodes, the one GPU on node 1: node 0 holds CPUs and no device.
    spread = pod("s", ctr("app", (4, 5, 8, 9), devices=(gpu("GPU-3", numa=1),)))
    assert misaligned(run(spread)) == [("s", "app")]


def test_memory_on_another_node_is_misaligned() -> None:
    p = pod("m", ctr("app", (2, 3), memory=(mem(GI, "memory", 0, 1),),
                     devices=(gpu("GPU-0", numa=0),)))
    ledger = run(p)
    assert misaligned(ledger) == [("m", "app")]
    assert "memory on NUMA node(s) 0,1" in ledger.anomalies[0].detail


def test_a_shared_container_with_a_gpu_is_not_judged_on_cpus() -> None:
    # node_shared CPUs are not the container's own: only its exclusive memory counts.
    p = pod("s", ctr("app", devices=(gpu("GPU-2", numa=1),)), ctr("pinned", (2, 3)))
    assert misaligned(run(p)) == []


def test_numa_ids_not_on_the_node_are_ignored_as_the_kubelet_does() -> None:
    bogus = pod("b", ctr("app", (2, 3), devices=(gpu("GPU-9", numa=7), gpu("x", numa=-1))))
    ledger = run(bogus)
    assert misaligned(ledger) == []
    counts = {(c.resource, c.numa_node): c for c in ledger.devices.counts}
    assert counts[(GPU, None)].assigned == 2  # no valid NUMA node: counted as without one


def test_pod_scope_judges_the_pod_and_with_a_block_each_slice() -> None:
    # Pod scope, no block: the pod's exclusive CPUs against all its devices.
    two = pod("two", ctr("a", (2, 3), devices=(gpu("GPU-0", numa=0),)),
              ctr("b", (8, 9)))
    assert misaligned(run(two, scope="pod")) == [("two", None)]
    ok = pod("ok", ctr("a", (2, 3), devices=(gpu("GPU-0", numa=0),)),
             ctr("b", (8, 9), devices=(gpu("GPU-2", numa=1),)))
    assert misaligned(run(ok, scope="pod")) == []
    # A pod block over both nodes, devices on both: the pod is aligned, but slice "a" on
    # node 0 has its own GPU on node 1.
    block = pod("blk", ctr("a", (2, 3), devices=(gpu("GPU-2", numa=1),)),
                ctr("b", (10, 11), devices=(gpu("GPU-0", numa=0),)), ctr("side"),
                cpus=(2, 3, 4, 10, 11))
    assert misaligned(run(block, scope="pod")) == [("blk", "a"), ("blk", "b")]
    assert misaligned(run(block, scope="pod", policy="single-numa-node")) == []


def test_no_config_or_topology_judges_nothing() -> None:
    snap = NodeSnapshot(pods=(TRAINER,), allocatable=ALLOCATABLE, topology=TWO_NUMA)
    assert misaligned(reconcile(snap)) == []
    snap = replace(snap, topology=None, kubelet_config=config("best-effort"))
    assert misaligned(reconcile(snap)) == []


def test_counts_per_resource_and_numa_node() -> None:
    claim = ClaimDevice("ml", "gpus", "gpu.example.com", "node-a", "gpu-7", ("cdi/gpu-7",))
    ledger = run(
        TRAINER,
        pod("infer", ctr("a", devices=(gpu("GPU-0", numa=0), gpu("GPU-3", numa=1))),
            ctr("b", devices=(gpu("vf-1", resource="intel.com/sriov"),), dynamic=(claim,))),
        # An init container's device reused by the app container counts once.
        pod("reuse", ctr("init", devices=(gpu("GPU-1", numa=0),)),
            ctr("app", devices=(gpu("GPU-1", numa=0),))),
        # A device the allocatable list does not hold (unhealthy, held still).
        pod("old", ctr("app", devices=(gpu("GPU-8", numa=1),))))
    assert ledger.devices.counts == (  # by resource name, then NUMA node
        DeviceCount("intel.com/sriov", None, 2, 1, 1),
        DeviceCount(GPU, 0, 2, 2, 0), DeviceCount(GPU, 1, 2, 3, 0))
    doc = json.loads(json.dumps(ledger.to_json()))["devices"]
    assert doc["by_resource"][GPU] == {
        "0": {"allocatable": 2, "assigned": 2, "free": 0},
        "1": {"allocatable": 2, "assigned": 3, "free": 0}}
    assert doc["by_resource"]["intel.com/sriov"] == {
        "none": {"allocatable": 2, "assigned": 1, "free": 1}}
    holders = [(c["pod"], c["container"]) for c in doc["containers"]]
    assert holders == [("trainer", "train"), ("infer", "a"), ("infer", "b"),
                       ("reuse", "init"), ("reuse", "app"), ("old", "app")]
    b = doc["containers"][2]
    assert b["dynamic_resources"] == [{
        "claim_namespace": "ml", "claim_name": "gpus", "driver": "gpu.example.com",
        "pool": "node-a", "device": "gpu-7", "cdi_devices": ["cdi/gpu-7"], "share_id": None}]
    assert doc["containers"][0]["devices"] == [
        {"resource": GPU, "device_ids": ["GPU-2"], "numa_nodes": [1]}]


def test_free_devices_without_holders() -> None:
    ledger = run(pod("plain", ctr("app")))
    assert {(c.resource, c.numa_node): (c.allocatable, c.assigned, c.free)
            for c in ledger.devices.counts} == {
        (GPU, 0): (2, 0, 2), (GPU, 1): (2, 0, 2), ("intel.com/sriov", None): (2, 0, 2)}
    assert ledger.to_json()["devices"]["containers"] == []


def test_a_node_without_devices_has_an_empty_devices_object() -> None:
    ledger = run(pod("plain", ctr("app", (2, 3))), allocatable=Allocatable(tuple(range(16))))
    assert ledger.to_json()["devices"] == {"by_resource": {}, "containers": [],
                                           "dropped_resources": 0}


def test_hostile_resource_names_and_too_many_resources_are_dropped_and_counted() -> None:
    names = [f"example.com/r{i:03}" for i in range(MAX_RESOURCES + 6)]
    hostile = ['x"y\n{z}', "ü" * 5000, "", "a/b/c", "-bad"]
    devices = tuple(DeviceAlloc(n, ("d",), (0,)) for n in names + hostile)
    ledger = run(pod("many", ctr("app", devices=devices)),
                 allocatable=Allocatable(tuple(range(1, 16))))
    published = {c.resource for c in ledger.devices.counts}
    assert published == set(names[:MAX_RESOURCES])
    assert ledger.devices.dropped_resources == 6 + len(hostile)
    # Every holder's devices are still listed, whatever their names.
    assert len(ledger.devices.containers[0].devices) == len(devices)
    json.dumps(ledger.to_json())


def test_huge_device_lists_and_numa_ids() -> None:
    ids = tuple(f"GPU-{i}" for i in range(20000))
    devices = (DeviceAlloc(GPU, ids[:10000], (0,)), DeviceAlloc(GPU, ids[10000:], (2**62,)),
               DeviceAlloc(GPU, ("neg",), (-(2**63),)))
    ledger = run(pod("big", ctr("app", (2, 3), devices=devices)),
                 allocatable=Allocatable(tuple(range(1, 16)), devices=devices))
    counts = {c.numa_node: (c.allocatable, c.assigned, c.free) for c in ledger.devices.counts}
    assert counts == {0: (10000, 10000, 0), None: (10001, 10001, 0)}
    assert misaligned(ledger) == []  # CPUs on node 0 with 10000 GPUs there


def test_without_topology_numa_ids_are_bounded() -> None:
    snap = NodeSnapshot(pods=(pod("p", ctr("app", devices=(
        DeviceAlloc(GPU, ("a",), (3,)), DeviceAlloc(GPU, ("b",), (5000,))))),),
        kubelet_config=config("best-effort"))
    counts = {c.numa_node: c.assigned for c in reconcile(snap).devices.counts}
    assert counts == {3: 1, None: 1}
