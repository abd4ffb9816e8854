"""Property tests: random topologies and random (hostile) PodResources answers.

Whatever the kubelet reports — duplicate, negative, unknown or overlapping ids, pods that
repeat, names with quotes, newlines or any unicode — the reconciler never raises, the CPU
pools add up to the online CPUs (also per NUMA node), and no CPU is counted twice (the CPU
map holds each online CPU once)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.render import render_ledger
from exporter.sources.convert import pods_from_proto, pods_to_proto
from foundation.helpers import check_invariants
from reconciler.kube import ContainerSpec, KubeletConfig, PodSpec, Resources
from reconciler.ledger import ANOMALY_KINDS, ASSIGNMENTS
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

HOSTILE_NAMES = st.one_of(
    st.text(max_size=12),
    st.sampled_from(['a"b', "a'b", "new\nline", "tab\there", "ünï©ødé", "😀", "", " ",
                     "\x00nul", "back\\slash", "{}", "a/b/c", "\u202erev", "x" * 300]),
)


@st.composite
def topologies(draw: st.DrawFn) -> Topology:
    sockets = draw(st.integers(1, 2))
    numa_per_socket = draw(st.integers(1, 2))
    cores = draw(st.integers(1, 8))
    smt = draw(st.integers(1, 2))
    n_cores = sockets * numa_per_socket * cores
    cpus = []
    for thread in range(smt):
        for core in range(n_cores):
            cpus.append(CPUInfo(thread * n_cores + core, core, core // (numa_per_socket * cores),
                                core // cores))
    # Some CPUs offline (ids missing from the middle), never all of them.
    offline = draw(st.sets(st.sampled_from([c.id for c in cpus]), max_size=len(cpus) - 1))
    online = tuple(c for c in cpus if c.id not in offline)
    memory = tuple((n, draw(st.integers(0, 2**40)))
                   for n in sorted({c.numa_node for c in online}))
    return Topology(online, memory)


def cpu_ids(limit: int) -> st.SearchStrategy[tuple[int, ...]]:
    ids = st.one_of(st.integers(0, limit + 3), st.integers(-3, -1),
                    st.integers(2**31, 2**63 - 1), st.just(-(2**63)))
    return st.lists(ids, max_size=8).map(tuple)


def memory_blocks() -> st.SearchStrategy[tuple[MemoryBlock, ...]]:
    block = st.builds(MemoryBlock, st.sampled_from(["memory", "hugepages-2Mi", "", "wéird"]),
                      st.integers(0, 2**64 - 1),
                      st.lists(st.integers(-1, 4), max_size=3).map(tuple))
    return st.lists(block, max_size=3).map(tuple)


@st.composite
def pod_allocs(draw: st.DrawFn, limit: int) -> tuple[PodAlloc, ...]:
    names = draw(st.lists(HOSTILE_NAMES, min_size=1, max_size=4))
    pods = []
    for _ in range(draw(st.integers(0, 8))):
        containers = tuple(
            ContainerAlloc(draw(st.sampled_from(names)), draw(cpu_ids(limit)),
                           draw(memory_blocks()))
            for _ in range(draw(st.integers(0, 5))))
        pods.append(PodAlloc(draw(st.sampled_from(names)), draw(st.sampled_from(names)),
                             containers, draw(cpu_ids(limit)), draw(memory_blocks())))
    # Sometimes a pod that repeats another one, or shares its containers' sets exactly
    # (the 1.36 pattern).
    if pods and draw(st.booleans()):
        pods.append(pods[draw(st.integers(0, len(pods) - 1))])
    return tuple(pods)


quantities = st.one_of(st.none(), st.sampled_from(["0", "1", "2", "500m", "2500m", "1Gi",
                                                   "64Mi", "3"]))


@st.composite
def resources(draw: st.DrawFn) -> Resources:
    from reconciler.kube import cpu_millis, memory_bytes

    cpu_r, cpu_l, mem_r, mem_l = (draw(quantities) for _ in range(4))
    return Resources(cpu_millis(cpu_r) if cpu_r else None, cpu_millis(cpu_l) if cpu_l else None,
                     memory_bytes(mem_r) if mem_r else None,
                     memory_bytes(mem_l) if mem_l else None)


@st.composite
def pod_specs(draw: st.DrawFn, pods: tuple[PodAlloc, ...]) -> tuple[PodSpec, ...] | None:
    if not draw(st.booleans()):
        return None
    specs = []
    for p in pods:
        if not draw(st.booleans()):
            continue
        containers = tuple(ContainerSpec(c.name, draw(resources()),
                                         sidecar=draw(st.booleans())) for c in p.containers)
        specs.append(PodSpec(p.namespace, p.name, uid=draw(HOSTILE_NAMES),
                             containers=tuple(c for c in containers if not c.sidecar),
                             init_containers=tuple(c for c in containers if c.sidecar),
                             resources=draw(st.one_of(st.none(), resources())),
                             qos_class=draw(st.sampled_from([None, "Guaranteed", "Burstable",
                                                             "BestEffort"]))))
    return tuple(specs)


configs = st.one_of(st.none(), st.builds(
    KubeletConfig,
    cpu_manager_policy=st.sampled_from(["none", "static", "Static"]),
    reserved_system_cpus=st.one_of(st.none(), st.frozensets(st.integers(0, 40), max_size=4)),
    topology_manager_policy=st.sampled_from(["none", "single-numa-node", "best-effort"]),
    topology_manager_scope=st.sampled_from(["container", "pod"]),
))


@st.composite
def snapshots(draw: st.DrawFn) -> tuple[NodeSnapshot, Topology | None]:
    topo = draw(st.one_of(st.none(), topologies()))
    limit = max((c.id for c in topo.cpus), default=8) if topo else 16
    pods = draw(pod_allocs(limit))
    allocatable = draw(st.one_of(st.none(), st.builds(Allocatable, cpu_ids(limit),
                                                      memory_blocks())))
    snap = NodeSnapshot(pods=pods, node_name=draw(HOSTILE_NAMES), allocatable=allocatable,
                        topology=topo, pod_specs=draw(pod_specs(pods)),
                        kubelet_config=draw(configs),
                        kubelet_info=(("version", draw(HOSTILE_NAMES)),))
    return snap, topo


SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(snapshots())
def test_reconcile_never_raises_and_keeps_invariants(case: tuple[NodeSnapshot, Topology | None]
                                                     ) -> None:
    snap, topo = case
    ledger = reconcile(snap)
    check_invariants(ledger, topo)
    if topo is not None:
        assert ledger.online_cpus == len(topo.cpus)
    # Every container and pod is reported once, in List order.
    assert [(p.namespace, p.name) for p in ledger.pods] == [(p.namespace, p.name)
                                                            for p in snap.pods]
    assert len(ledger.containers) == sum(len(p.containers) for p in snap.pods)
    online = {c.id for c in ledger.cpu_map}
    for c in ledger.containers:
        assert c.assignment in ASSIGNMENTS and c.memory_assignment in ASSIGNMENTS
        assert c.cpus <= online  # unknown ids are left out of every cpuset
        assert c.memory_bytes >= 0
    for p in ledger.pods:
        assert p.cpus <= online
        assert min(p.pod_exclusive_cpus, p.pod_shared_cpus, p.pod_idle_cpus,
                   p.node_exclusive_cpus) >= 0
        assert (p.reclaimed_cpus is None) != (p.reclaimable_cpus is None)
    for a in ledger.anomalies:
        assert a.kind in ANOMALY_KINDS
    for sizes in dict(ledger.memory_pools).values():
        assert min(sizes) >= 0
    # The JSON form is valid, lossless JSON whatever the names, and the table renders.
    text = json.dumps(ledger.to_json(), ensure_ascii=False)
    assert json.loads(text) == ledger.to_json()
    table = render_ledger(ledger)
    assert table.count("\n") >= len(ledger.pods) + len(ledger.containers)


@SETTINGS
@given(snapshots())
def test_exclusive_cpus_are_owned_once(case: tuple[NodeSnapshot, Topology | None]) -> None:
    snap, _ = case
    ledger = reconcile(snap)
    owners: dict[int, str] = {}
    for cell in ledger.cpu_map:
        assert cell.id not in owners
        owners[cell.id] = cell.pool
    exclusive = [c for c in ledger.cpu_map if c.pool in ("node_exclusive", "pod_exclusive")]
    assert len(exclusive) == ledger.cpu_pools.node_exclusive + ledger.cpu_pools.pod_exclusive
    # Exclusive cells name one owner each.
    assert all(c.owner for c in exclusive)


@SETTINGS
@given(snapshots())
def test_reconcile_is_deterministic(case: tuple[NodeSnapshot, Topology | None]) -> None:
    snap, _ = case
    assert reconcile(snap).to_json() == reconcile(snap).to_json()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_through_the_wire_format(case: tuple[NodeSnapshot, Topology | None]) -> None:
    """The same hostile answers, encoded as the kubelet would send them and decoded again."""
    snap, topo = case
    from exporter.pb import api_pb2

    raw = pods_to_proto(snap.pods).SerializeToString()
    decoded = pods_from_proto(api_pb2.ListPodResourcesResponse.FromString(raw))
    assert len(decoded) == len(snap.pods)
    ledger = reconcile(NodeSnapshot(pods=decoded, topology=topo))
    check_invariants(ledger, topo)
