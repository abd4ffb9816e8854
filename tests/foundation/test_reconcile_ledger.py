"""Classification (docs/design.md#classification), pools and their precedence (#cpu-pools,
#ownership), estimates (#estimates) and the ledger's JSON form (#data-path), on hand-built
nodes."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from foundation.helpers import (
    GI,
    STATIC,
    check_invariants,
    cspec,
    ctr,
    kinds,
    mem,
    pod,
    pspec,
    snapshot,
    topology,
)
from reconciler.estimates import spec_legacy_cost
from reconciler.kube import KubeletConfig
from reconciler.ledger import Ledger, PoolCounts
from reconciler.pools import ASSIGNMENTS, CPU_POOLS, EXCLUSIVE, MEMORY_POOLS
from reconciler.reconcile import reconcile

TOPO = topology(16, numa=2, sockets=2, smt=2)


def run(*pods, **kw) -> Ledger:  # type: ignore[no-untyped-def]
    ledger = reconcile(snapshot(*pods, **kw))
    check_invariants(ledger, kw.get("topo"))
    return ledger


def by_name(ledger: Ledger) -> dict[str, dict]:  # type: ignore[type-arg]
    return {f"{c.pod}/{c.name}": c.to_json() for c in ledger.containers}


def test_pod_scope_hybrid() -> None:
    ledger = run(pod("web", ctr("proxy"), ctr("shipper"), ctr("app", [2, 3]), cpus=[2, 3, 4]),
                 topo=TOPO, allocatable=range(1, 16))
    c = by_name(ledger)
    assert c["web/app"]["assignment"] == "pod_exclusive" and c["web/app"]["cpus"] == "2-3"
    assert c["web/proxy"]["assignment"] == "pod_shared" and c["web/proxy"]["cpus"] == "4"
    assert c["web/shipper"]["cpu_count"] == 1
    p = ledger.pods[0].to_json()
    assert p["cpus"] == "2-4" and p["pod_exclusive_cpus"] == 2 and p["pod_shared_cpus"] == 1
    assert p["reclaimed_cpus"] == 1 and p["reclaimable_cpus"] is None
    assert p["estimate_basis"] == "podresources"
    assert ledger.cpu_pools.to_json() == {"reserved": 1, "node_shared": 12,
                                          "node_exclusive": 0, "pod_exclusive": 2,
                                          "pod_shared": 1, "pod_idle": 0}


def test_pod_scope_all_exclusive_leaves_idle_remainder() -> None:
    ledger = run(pod("db", ctr("db", [2, 3]), cpus=[2, 3, 4, 5]), topo=TOPO)
    assert ledger.cpu_pools.pod_idle == 2 and ledger.cpu_pools.pod_shared == 0
    assert ledger.pods[0].pod_idle_cpus == 2 and ledger.pods[0].pod_shared_cpus == 0
    assert ledger.pods[0].reclaimed_cpus == 2 - 4


def test_container_scope_and_node_shared() -> None:
    ledger = run(pod("legacy", ctr("proxy", [5]), ctr("app", [2, 3])),
                 pod("burst", ctr("app")), topo=TOPO)
    c = by_name(ledger)
    assert c["legacy/proxy"]["assignment"] == "node_exclusive"
    assert c["burst/app"] == {**c["burst/app"], "assignment": "node_shared", "cpus": "",
                              "cpu_count": 0}
    assert ledger.pods[0].node_exclusive_cpus == 3 and ledger.pods[0].cpus == frozenset()
    assert ledger.pods[0].reclaimed_cpus is None
    assert ledger.cpu_pools.node_exclusive == 3 and ledger.cpu_pools.node_shared == 13


@pytest.mark.parametrize(("sizes", "want"), [
    ([2, 1, 1], 1),  # the motivating example: app 2 + proxy 1 + shipper 1
    ([2, 1, 1, 1], 2),  # plus a metrics exporter
    ([2, 1], 0), ([4], 0), ([1, 1], 0), ([1, 1, 1], 1), ([2, 2, 1], 0), ([3, 1, 2, 1, 1], 2),
])
def test_reclaimable(sizes: list[int], want: int) -> None:
    cpu = 1
    containers = []
    for i, n in enumerate(sizes):
        containers.append(ctr(f"c{i}", range(cpu, cpu + n)))
        cpu += n
    ledger = run(pod("p", *containers), topo=TOPO)
    assert ledger.pods[0].reclaimable_cpus == want
    assert ledger.reclaimable_cpus == want


def test_reclaimed_database_example_with_spec() -> None:
    spec = pspec("db", cspec("db", "6", "24Gi"), budget="8", budget_memory="32Gi",
                 sidecars=[cspec("proxy", "500m", "256Mi", sidecar=True, guaranteed=False),
                           cspec("backup", "1", "1Gi", sidecar=True, guaranteed=False)])
    ledger = run(pod("db", ctr("proxy"), ctr("backup"), ctr("db", range(8, 14)),
                     cpus=range(8, 16)), topo=TOPO, specs=[spec], config=STATIC)
    p = ledger.pods[0]
    assert (p.budget_cpus, p.reclaimed_cpus, p.estimate_basis) == (8, 0, "spec")
    c = {x.name: x for x in ledger.containers}
    assert c["proxy"].sidecar and c["backup"].sidecar and not c["db"].sidecar


def test_legacy_cost_uses_limits_when_spec_known() -> None:
    # A shared sidecar with a 2.5 CPU limit would have pinned 3 CPUs in the old model.
    spec = pspec("p", cspec("app", "2"), budget="3",
                 sidecars=[cspec("proxy", "2500m", sidecar=True, guaranteed=True)])
    ledger = run(pod("p", ctr("proxy"), ctr("app", [2, 3]), cpus=[2, 3, 4]), topo=TOPO,
                 specs=[spec])
    assert ledger.pods[0].reclaimed_cpus == 2 + 3 - 3


def test_planned_legacy_cost_is_the_reconciled_one_for_a_pod_placed_as_planned() -> None:
    # The motivating example: app 2 exclusive + proxy + log shipper, budget 3 → legacy 4;
    # the plan (from the spec) and the reconciler (from the report) share one rule.
    spec = pspec("p", cspec("app", "2"), cspec("shipper", "200m"), budget="3",
                 sidecars=[cspec("proxy", "500m", sidecar=True)])
    assert spec_legacy_cost(spec) == 4
    ledger = run(pod("p", ctr("proxy"), ctr("app", [2, 3]), ctr("shipper"), cpus=[2, 3, 4]),
                 topo=TOPO, specs=[spec])
    assert ledger.pods[0].reclaimed_cpus == spec_legacy_cost(spec) - 3 == 1


def test_list_order_is_kept() -> None:
    names = ["z", "a", "m", "b"]
    ledger = run(*(pod(n, ctr("c2"), ctr("c1")) for n in names), topo=TOPO)
    assert [p.name for p in ledger.pods] == names
    assert [(c.pod, c.name) for c in ledger.containers][:2] == [("z", "c2"), ("z", "c1")]


def test_first_owner_wins_and_reserved_counts_in_assignment() -> None:
    ledger = run(pod("a", ctr("app", [0, 1])), pod("b", ctr("app", [1, 2])), topo=TOPO,
                 allocatable=range(1, 16))
    cells = {c.id: c for c in ledger.cpu_map}
    assert cells[0].pool == "node_exclusive" and cells[0].owner == "default/a/app"
    assert cells[1].owner == "default/a/app"
    assert cells[2].owner == "default/b/app"
    assert set(kinds(ledger)) == {"exclusive_overlap", "reserved_cpu_assigned"}
    assert ledger.cpu_pools.reserved == 0


def test_never_adds_pod_level_and_container_level_lists() -> None:
    ledger = run(pod("p", ctr("app", [2, 3]), ctr("s"), cpus=[2, 3, 4]), topo=TOPO)
    assert ledger.cpu_pools.pod_exclusive + ledger.cpu_pools.pod_shared == 3


def test_without_topology_online_comes_from_the_reports() -> None:
    ledger = run(pod("p", ctr("app", [2, 3]), ctr("bad", [-4])), allocatable=range(1, 8),
                 config=KubeletConfig(reserved_system_cpus=frozenset({0})))
    assert ledger.online_cpus == 8
    assert ledger.numa_nodes is None and ledger.cpu_pools_by_numa == ()
    assert ledger.to_json()["cpu_pools_by_numa"] == {}
    assert ledger.cpu_pools.reserved == 1
    assert "unknown_cpu" in kinds(ledger)


def test_reserved_from_config_when_allocatable_empty() -> None:
    config = KubeletConfig(cpu_manager_policy="none", reserved_system_cpus=frozenset({0, 8}))
    ledger = run(pod("p", ctr("app")), topo=TOPO, config=config)
    assert ledger.cpu_pools.reserved == 2 and ledger.cpu_pools.node_shared == 14


def test_per_numa_breakdown() -> None:
    # TOPO: cores 0-3 on NUMA 0 (CPUs 0-3, 8-11), cores 4-7 on NUMA 1 (CPUs 4-7, 12-15).
    ledger = run(pod("p", ctr("app", [4, 12]), ctr("s"), cpus=[4, 12, 5]), topo=TOPO)
    by_numa = dict(ledger.cpu_pools_by_numa)
    assert by_numa[1].pod_exclusive == 2 and by_numa[1].pod_shared == 1
    assert by_numa[0].node_shared == 8
    assert ledger.numa_nodes == 2
    assert set(ledger.to_json()["cpu_pools_by_numa"]) == {"0", "1"}


def test_memory_pools_and_assignments() -> None:
    ledger = run(pod("hy", ctr("proxy"), ctr("app", [2, 3], [mem(4 * GI)]), cpus=[2, 3, 4],
                     memory=[mem(6 * GI), mem(GI, "hugepages-1Gi")]),
                 pod("leg", ctr("app", [5], [mem(2 * GI)])), pod("none", ctr("x")), topo=TOPO)
    pools = dict(ledger.memory_pools)
    assert pools["memory"] == (2 * GI, 4 * GI, 2 * GI)
    assert pools["hugepages-1Gi"] == (0, 0, GI)
    c = {f"{x.pod}/{x.name}": x for x in ledger.containers}
    assert c["hy/app"].memory_assignment == "pod_exclusive"
    assert c["hy/proxy"].memory_assignment == "pod_shared"
    assert c["leg/app"].memory_assignment == "node_exclusive"
    assert c["none/x"].memory_assignment == "node_shared"
    doc = ledger.to_json()["memory_pools"]
    assert doc["memory"] == {"node_exclusive": 2 * GI, "pod_exclusive": 4 * GI,
                             "pod_shared": 2 * GI}


def test_legacy_memory_pattern_counted_once() -> None:
    # 1.36: the shared containers report the pod shared pool's CPUs and memory as theirs.
    shared = [mem(2 * GI, "memory", 0)]
    ledger = run(pod("p", ctr("proxy", [4], shared), ctr("shipper", [4], shared),
                     ctr("app", [2, 3], [mem(4 * GI)])), topo=TOPO)
    assert dict(ledger.memory_pools)["memory"] == (0, 4 * GI, 2 * GI)
    c = {x.name: x.memory_assignment for x in ledger.containers}
    assert c == {"proxy": "pod_shared", "shipper": "pod_shared", "app": "pod_exclusive"}


def test_identical_memory_blocks_of_ordinary_containers_are_their_own() -> None:
    # Two exclusive containers of 2 GiB on NUMA 0 report identical blocks; without the
    # 1.36 CPU evidence that is not a shared report, and each holds its own memory.
    same = [mem(2 * GI, "memory", 0)]
    ledger = run(pod("p", ctr("a", [2], same), ctr("b", [3], same)), topo=TOPO)
    assert dict(ledger.memory_pools)["memory"] == (4 * GI, 0, 0)
    assert {x.memory_assignment for x in ledger.containers} == {"node_exclusive"}


def test_kubelet_info_in_ledger() -> None:
    ledger = run(pod("p", ctr("a")), topo=TOPO, config=STATIC)
    kubelet = ledger.to_json()["node"]["kubelet"]
    assert kubelet["cpu_manager_policy"] == "static"
    assert kubelet["topology_manager_scope"] == "pod"


def test_ledger_is_immutable_and_comparable() -> None:
    a = run(pod("p", ctr("app", [2])), topo=TOPO)
    b = run(pod("p", ctr("app", [2])), topo=TOPO)
    assert a == b
    with pytest.raises(AttributeError):
        a.reclaimed_cpus = 3  # type: ignore[misc]
    assert json.loads(json.dumps(a.to_json())) == a.to_json()


def test_empty_node() -> None:
    ledger = run(topo=TOPO)
    assert ledger.pods == () and ledger.containers == () and ledger.anomalies == ()
    assert ledger.cpu_pools.node_shared == 16
    assert ledger.reclaimed_cpus == ledger.reclaimable_cpus == 0
    empty = reconcile(snapshot())
    assert empty.online_cpus == 0 and empty.cpu_pools.total == 0


def test_pool_vocabulary_matches_the_ledger_records() -> None:
    # One vocabulary: the pool counts, the JSON keys and the CPU map all use its names.
    assert tuple(f.name for f in fields(PoolCounts)) == CPU_POOLS
    ledger = run(pod("a", ctr("app", [2, 3]), ctr("proxy"), cpus=[2, 3, 4]), topo=TOPO,
                 allocatable=range(1, 32))
    assert tuple(ledger.cpu_pools.to_json()) == CPU_POOLS
    assert {cell.pool for cell in ledger.cpu_map} <= set(CPU_POOLS)
    assert {c.assignment for c in ledger.containers} <= set(ASSIGNMENTS)
    assert set(EXCLUSIVE) <= set(ASSIGNMENTS) and set(MEMORY_POOLS) <= set(ASSIGNMENTS)


def test_reclaimable_cores_as_the_rule_reads() -> None:
    """The rule of docs/design.md#estimates, written out (the largest exclusive container,
    first on ties, stays; k ≥ 2 one-CPU candidates give back k − 1), against the counted
    form reconcile uses, on every list of up to six counts of 0 to 3 CPUs."""
    from itertools import product

    from reconciler.estimates import reclaimable_cores

    def rule(counts: list[int]) -> int:
        if not counts:
            return 0
        largest = max(range(len(counts)), key=lambda i: (counts[i], -i))
        k = sum(1 for i, n in enumerate(counts) if n == 1 and i != largest)
        return k - 1 if k >= 2 else 0

    for size in range(7):
        for counts in product(range(4), repeat=size):
            assert reclaimable_cores(list(counts)) == rule(list(counts)), counts
