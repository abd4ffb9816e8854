"""Every anomaly kind the reconciler checks (docs/design.md#anomalies), raised on a
hand-built node, and a near miss that is not; and the order anomalies are listed in."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import get_args

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
from reconciler.anomalies import POD_ORDER, REPORT_ORDER, AnomalyKind, AnomalyLog
from reconciler.kube import KubeletConfig
from reconciler.ledger import ANOMALY_KINDS, Anomaly
from reconciler.reconcile import reconcile
from reconciler.snapshot import ContainerAlloc, DeviceAlloc, PodAlloc, Topology

TOPO = topology(8)  # CPUs 0-7, one NUMA node
TWO_NUMA = topology(8, numa=2, sockets=2)  # 0-3 on node 0, 4-7 on node 1


def run(*pods, **kw):  # type: ignore[no-untyped-def]
    ledger = reconcile(snapshot(*pods, **kw))
    check_invariants(ledger, kw.get("topo"))
    return ledger


def test_every_kind_has_a_test_here() -> None:
    source = Path(__file__).read_text(encoding="utf-8")
    for kind in ANOMALY_KINDS:
        assert f"def test_{kind}_raised" in source, kind
        assert f"def test_{kind}_near_miss" in source, kind


# -- exclusive_overlap ------------------------------------------------------------------

def test_exclusive_overlap_raised_for_two_pod_blocks() -> None:
    ledger = run(pod("a", ctr("app", [2, 3]), cpus=[2, 3, 4]),
                 pod("b", ctr("app", [4, 5]), cpus=[4, 5, 6]), topo=TOPO)
    overlaps = [a for a in ledger.anomalies if a.kind == "exclusive_overlap"]
    assert len(overlaps) == 1 and overlaps[0].pod == "b" and "4" in overlaps[0].detail
    # Counted once, for the first owner.
    assert ledger.cpu_pools.pod_exclusive + ledger.cpu_pools.pod_idle == 5


def test_exclusive_overlap_raised_for_two_exclusive_containers_of_different_pods() -> None:
    ledger = run(pod("a", ctr("app", [2, 3])), pod("b", ctr("app", [3, 4])), topo=TOPO)
    assert kinds(ledger) == ["exclusive_overlap"]
    assert ledger.cpu_pools.node_exclusive == 3


def test_exclusive_overlap_near_miss() -> None:
    # A pod block and its own container slice overlap by design; disjoint pods do not.
    ledger = run(pod("a", ctr("app", [2, 3]), ctr("proxy"), cpus=[2, 3, 4]),
                 pod("b", ctr("app", [5, 6])), topo=TOPO)
    assert kinds(ledger) == []


# -- container_outside_pod --------------------------------------------------------------

def test_container_outside_pod_raised() -> None:
    ledger = run(pod("a", ctr("app", [2, 5]), ctr("proxy"), cpus=[2, 3, 4]), topo=TOPO)
    found = [a for a in ledger.anomalies if a.kind == "container_outside_pod"]
    assert len(found) == 1 and found[0].container == "app" and "5" in found[0].detail


def test_container_outside_pod_near_miss() -> None:
    ledger = run(pod("a", ctr("app", [2, 3]), ctr("proxy"), cpus=[2, 3, 4]), topo=TOPO)
    assert "container_outside_pod" not in kinds(ledger)


# -- unknown_cpu --------------------------------------------------------------------------

def test_unknown_cpu_raised_for_offline_and_negative_ids() -> None:
    ledger = run(pod("a", ctr("app", [2, 99]), ctr("b", [-1, (1 << 63) - 1])), topo=TOPO)
    found = [a for a in ledger.anomalies if a.kind == "unknown_cpu"]
    assert {a.container for a in found} == {"app", "b"}
    assert ledger.online_cpus == 8
    assert ledger.cpu_pools.node_exclusive == 1


def test_unknown_cpu_raised_for_pod_block() -> None:
    ledger = run(pod("a", ctr("app", [2]), cpus=[2, 3, 1000]), topo=TOPO)
    assert [a.container for a in ledger.anomalies if a.kind == "unknown_cpu"] == [None]


def test_unknown_cpu_raised_for_the_nodes_own_lists() -> None:
    """Allocatable ids and reservedSystemCPUs the kubelet could not have (2^63-1,
    negative, past the machine): one node-level anomaly per list, no pod named, and no
    set as large as the ids (the ledger is built at once)."""
    huge = (1 << 63) - 1
    ledger = run(pod("a", ctr("app", [2])), topo=TOPO,
                 allocatable=[1, 2, 3, 4, 5, 6, 7, huge, -5],
                 config=KubeletConfig(cpu_manager_policy="static",
                                      reserved_system_cpus=frozenset({0, 5000})))
    found = [a for a in ledger.anomalies if a.kind == "unknown_cpu"]
    assert [(a.namespace, a.pod, a.container) for a in found] == [(None, None, None)] * 2
    assert found[0].detail == f"allocatable CPU ids not online on this node: -5,{huge}"
    assert found[1].detail == "reservedSystemCPUs not online on this node: 5000"
    assert ledger.anomalies[:2] == tuple(found)  # node-level anomalies come first
    assert ledger.online_cpus == 8
    assert ledger.cpu_pools.reserved == 1  # CPU 0: online and not allocatable


def test_unknown_cpu_near_miss() -> None:
    ledger = run(pod("a", ctr("app", [6, 7])), topo=TOPO, allocatable=range(1, 8),
                 config=KubeletConfig(reserved_system_cpus=frozenset({0})))
    assert kinds(ledger) == []


# -- reserved_cpu_assigned ----------------------------------------------------------------

def test_reserved_cpu_assigned_raised() -> None:
    ledger = run(pod("a", ctr("app", [0, 1])), topo=TOPO, allocatable=range(1, 8))
    assert kinds(ledger) == ["reserved_cpu_assigned"]
    assert ledger.cpu_pools.reserved == 0 and ledger.cpu_pools.node_exclusive == 2


def test_reserved_cpu_assigned_raised_for_pod_block_from_config() -> None:
    config = KubeletConfig(cpu_manager_policy="static", reserved_system_cpus=frozenset({0}))
    ledger = run(pod("a", ctr("app", [1]), ctr("proxy"), cpus=[0, 1]), topo=TOPO,
                 config=config)
    assert "reserved_cpu_assigned" in kinds(ledger)


def test_reserved_cpu_assigned_near_miss() -> None:
    ledger = run(pod("a", ctr("app", [1, 2])), topo=TOPO, allocatable=range(1, 8))
    assert kinds(ledger) == []
    assert ledger.cpu_pools.reserved == 1


# -- empty_pod_shared_pool ----------------------------------------------------------------

def test_empty_pod_shared_pool_raised() -> None:
    ledger = run(pod("a", ctr("proxy"), ctr("app", [2, 3]), cpus=[2, 3]), topo=TOPO)
    assert kinds(ledger) == ["empty_pod_shared_pool"]
    proxy = next(c for c in ledger.containers if c.name == "proxy")
    assert proxy.assignment == "pod_shared" and proxy.cpu_count == 0


def test_empty_pod_shared_pool_near_miss() -> None:
    # A shared pool of one CPU, and a fully exclusive pod with nobody needing the pool.
    ledger = run(pod("a", ctr("proxy"), ctr("app", [2, 3]), cpus=[2, 3, 4]),
                 pod("b", ctr("app", [5, 6]), cpus=[5, 6]), topo=TOPO)
    assert kinds(ledger) == []
    assert ledger.cpu_pools.pod_shared == 1 and ledger.cpu_pools.pod_idle == 0


# -- legacy_shared_report -----------------------------------------------------------------

def test_legacy_shared_report_raised_for_identical_sets() -> None:
    ledger = run(pod("a", ctr("proxy", [4]), ctr("shipper", [4]), ctr("app", [2, 3])),
                 topo=TOPO)
    assert [a.kind for a in ledger.anomalies] == ["legacy_shared_report"]
    by_name = {c.name: c for c in ledger.containers}
    assert by_name["proxy"].assignment == by_name["shipper"].assignment == "pod_shared"
    assert by_name["app"].assignment == "pod_exclusive"
    assert ledger.cpu_pools.pod_shared == 1 and ledger.cpu_pools.pod_exclusive == 2
    assert ledger.cpu_pools.node_exclusive == 0
    assert ledger.pods[0].cpus == frozenset({2, 3, 4})


def test_legacy_shared_report_raised_for_overlap_with_pod_budget() -> None:
    spec = pspec("a", cspec("app", "2"), cspec("proxy"), budget="3")
    ledger = run(pod("a", ctr("app", [2, 3]), ctr("proxy", [3, 4])), topo=TOPO,
                 specs=[spec])
    assert "legacy_shared_report" in kinds(ledger)


def test_legacy_shared_report_raised_for_one_container_on_the_pool() -> None:
    # The real 1.36 kubelet (tests/realnode, 1.36 on 64amd64-4s2n4ca2co, pod scope, gate
    # on): pod budget 2, app 1 CPU, a sidecar without requests; its block 6-7 is reported
    # as app 6 and proxy 7, nothing shared twice. The proxy cannot hold CPUs of its own.
    spec = pspec("a", cspec("app", "1"), budget="2", sidecars=[cspec("proxy", sidecar=True)])
    ledger = run(pod("a", ctr("proxy", [7]), ctr("app", [6])), topo=TOPO, specs=[spec])
    assert kinds(ledger) == ["legacy_shared_report"]
    by_name = {c.name: c for c in ledger.containers}
    assert by_name["proxy"].assignment == "pod_shared"
    assert by_name["app"].assignment == "pod_exclusive"
    assert ledger.pods[0].cpus == frozenset({6, 7})
    assert ledger.cpu_pools.node_exclusive == 0
    # Alone in its pod, a container without requests on a pool of two CPUs.
    spec = pspec("a", cspec("app"), budget="2")
    ledger = run(pod("a", ctr("app", [4, 5])), topo=TOPO, specs=[spec])
    assert kinds(ledger) == ["legacy_shared_report"]
    assert ledger.pods[0].cpus == frozenset({4, 5}) and ledger.cpu_pools.pod_shared == 2


def test_legacy_shared_report_near_miss() -> None:
    # Different sets, no pod budget: two node_exclusive containers.
    ledger = run(pod("a", ctr("proxy", [4]), ctr("app", [2, 3])), topo=TOPO)
    assert kinds(ledger) == []
    assert {c.assignment for c in ledger.containers} == {"node_exclusive"}
    # Overlapping sets without a pod budget are not the 1.36 pattern either.
    ledger = run(pod("a", ctr("proxy", [3, 4]), ctr("app", [2, 3])), topo=TOPO,
                 specs=[pspec("a", cspec("app", "2"), cspec("proxy", "2"))])
    assert "legacy_shared_report" not in kinds(ledger)
    # With a pod budget, containers that each own integer CPUs are not the pattern.
    spec = pspec("a", cspec("app", "1"), cspec("proxy", "1"), budget="2")
    ledger = run(pod("a", ctr("proxy", [7]), ctr("app", [6])), topo=TOPO, specs=[spec])
    assert kinds(ledger) == []


# -- budget_mismatch ----------------------------------------------------------------------

def test_budget_mismatch_raised() -> None:
    spec = pspec("a", cspec("app", "2"), budget="3", sidecars=[cspec("proxy", sidecar=True)])
    ledger = run(pod("a", ctr("proxy"), ctr("app", [2, 3]), cpus=[2, 3, 4, 5]), topo=TOPO,
                 specs=[spec])
    assert kinds(ledger) == ["budget_mismatch"]


def test_budget_mismatch_raised_for_fractional_budget() -> None:
    spec = pspec("a", cspec("app", "2"), budget="2500m")
    ledger = run(pod("a", ctr("app", [2, 3]), cpus=[2, 3, 4]), topo=TOPO, specs=[spec])
    assert "budget_mismatch" in kinds(ledger)


def test_budget_mismatch_near_miss() -> None:
    spec = pspec("a", cspec("app", "2"), budget="3", sidecars=[cspec("proxy", sidecar=True)])
    ledger = run(pod("a", ctr("proxy"), ctr("app", [2, 3]), cpus=[2, 3, 4]), topo=TOPO,
                 specs=[spec])
    assert kinds(ledger) == []
    # Without a spec the budget is unknown: never a mismatch.
    ledger = run(pod("a", ctr("proxy"), ctr("app", [2, 3]), cpus=[2, 3, 4, 5]), topo=TOPO)
    assert kinds(ledger) == []


# -- missing_exclusive --------------------------------------------------------------------

def test_missing_exclusive_raised() -> None:
    spec = pspec("a", cspec("app", "2", "1Gi"))
    ledger = run(pod("a", ctr("app")), topo=TOPO, specs=[spec], config=STATIC)
    found = [a for a in ledger.anomalies if a.kind == "missing_exclusive"]
    assert len(found) == 1 and found[0].container == "app"


def test_missing_exclusive_raised_in_pod_scope() -> None:
    spec = pspec("a", cspec("app", "2"), budget="3", sidecars=[cspec("proxy", sidecar=True)])
    ledger = run(pod("a", ctr("proxy"), ctr("app"), cpus=[2, 3, 4]), topo=TOPO,
                 specs=[spec], config=STATIC)
    assert [a.container for a in ledger.anomalies if a.kind == "missing_exclusive"] == ["app"]


def test_missing_exclusive_near_miss() -> None:
    # Not eligible (fractional CPU; burstable), a policy other than static, or it got CPUs.
    fractional = pspec("a", cspec("app", "1500m"))
    burstable = pspec("b", cspec("app", "2", guaranteed=False))
    got = pspec("c", cspec("app", "2"))
    ledger = run(pod("a", ctr("app")), pod("b", ctr("app")), pod("c", ctr("app", [2, 3])),
                 topo=TOPO, specs=[fractional, burstable, got], config=STATIC)
    assert kinds(ledger) == []
    ledger = run(pod("c", ctr("app")), topo=TOPO, specs=[got],
                 config=KubeletConfig(cpu_manager_policy="none"))
    assert kinds(ledger) == []


# -- numa_misaligned ----------------------------------------------------------------------

def test_numa_misaligned_raised_for_block_and_container() -> None:
    ledger = run(pod("a", ctr("app", [2, 3]), ctr("proxy"), cpus=[2, 3, 4]),
                 pod("b", ctr("app", [1, 5])), topo=TWO_NUMA, config=STATIC)
    found = {(a.pod, a.container) for a in ledger.anomalies if a.kind == "numa_misaligned"}
    assert found == {("a", None), ("b", "app")}


def test_numa_misaligned_near_miss() -> None:
    aligned = (pod("a", ctr("app", [2, 3]), ctr("proxy"), cpus=[1, 2, 3]),
               pod("b", ctr("app", [4, 5])))
    assert kinds(run(*aligned, topo=TWO_NUMA, config=STATIC)) == []
    # Spanning nodes is allowed under any other topology policy.
    relaxed = KubeletConfig(cpu_manager_policy="static", topology_manager_policy="best-effort")
    spanning = pod("b", ctr("app", [1, 5]))
    assert kinds(run(spanning, topo=TWO_NUMA, config=relaxed)) == []


# -- full_pcpus_violation -----------------------------------------------------------------

SMT = topology(8, smt=2)  # cores 0-3; CPU c and c+4 are siblings


def _options(*opts: str, policy: str = "none", scope: str = "container",
             value: str = "true") -> KubeletConfig:
    return KubeletConfig(cpu_manager_policy="static", topology_manager_policy=policy,
                         topology_manager_scope=scope,
                         cpu_manager_policy_options=tuple((o, value) for o in opts))


def test_full_pcpus_violation_raised() -> None:
    ledger = run(pod("a", ctr("app", [0, 1])), pod("b", ctr("app", [2, 6]), cpus=[2, 6, 3]),
                 topo=SMT, config=_options("full-pcpus-only"))
    found = {(a.pod, a.container) for a in ledger.anomalies if a.kind == "full_pcpus_violation"}
    assert found == {("a", "app"), ("b", None)}
    detail = next(a.detail for a in ledger.anomalies if a.pod == "a")
    assert "threads 0-1,4-5" in detail


def test_full_pcpus_violation_near_miss() -> None:
    whole = (pod("a", ctr("app", [0, 4])), pod("b", ctr("app", [2, 6]), cpus=[2, 6, 3, 7]))
    assert kinds(run(*whole, topo=SMT, config=_options("full-pcpus-only"))) == []
    halves = pod("a", ctr("app", [0, 1]))
    # The option off, or set to false, allows half cores.
    assert kinds(run(halves, topo=SMT, config=_options())) == []
    assert kinds(run(halves, topo=SMT, config=_options("full-pcpus-only", value="false"))) == []


# -- numa_policy_violation ----------------------------------------------------------------

def test_numa_policy_violation_raised() -> None:
    # restricted, container scope: 2 CPUs fit one node but span two.
    ledger = run(pod("a", ctr("app", [1, 5])), topo=TWO_NUMA,
                 config=_options(policy="restricted"))
    assert kinds(ledger) == ["numa_policy_violation"]
    assert ledger.anomalies[0].container == "app"
    assert "allows 1 for 2 CPUs" in ledger.anomalies[0].detail
    # single-numa-node, pod scope: each set on one node, the pod on two.
    ledger = run(pod("b", ctr("app", [1]), ctr("side", [5])), topo=TWO_NUMA, config=STATIC)
    assert kinds(ledger) == ["numa_policy_violation"]
    assert (ledger.anomalies[0].pod, ledger.anomalies[0].container) == ("b", None)


def test_numa_policy_violation_near_miss() -> None:
    restricted = _options(policy="restricted")
    # 5 CPUs need two nodes of 4.
    assert kinds(run(pod("a", ctr("app", [0, 1, 2, 3, 4])), topo=TWO_NUMA,
                     config=restricted)) == []
    # Memory on both nodes widens the merged hint.
    both = mem(GI, "memory", 0, 1)
    assert kinds(run(pod("a", ctr("app", [1, 5], [both])), topo=TWO_NUMA,
                     config=restricted)) == []
    # Under single-numa-node one set across nodes is numa_misaligned, reported once.
    assert kinds(run(pod("a", ctr("app", [1, 5])), topo=TWO_NUMA,
                     config=STATIC)) == ["numa_misaligned"]
    # Container scope judges containers one by one; best-effort allows any spread.
    apart = pod("b", ctr("app", [1]), ctr("side", [5]))
    assert kinds(run(apart, topo=TWO_NUMA, config=restricted)) == []
    assert kinds(run(pod("a", ctr("app", [1, 5])), topo=TWO_NUMA,
                     config=_options(policy="best-effort"))) == []


# -- uncore_split -------------------------------------------------------------------------

UNCORE = Topology(tuple(replace(c, uncore=c.id // 4) for c in TOPO.cpus), TOPO.memory)
UNCORE_ON = _options("prefer-align-cpus-by-uncorecache")


def test_uncore_split_raised() -> None:
    ledger = run(pod("a", ctr("app", [2, 3, 4, 5])), topo=UNCORE, config=UNCORE_ON)
    assert kinds(ledger) == ["uncore_split"]
    assert ledger.anomalies[0].container == "app"
    assert "caches 0,1 although cache 0 (0-3)" in ledger.anomalies[0].detail
    # A pod block is judged too.
    ledger = run(pod("b", ctr("app", [2]), cpus=[2, 3, 4]), topo=UNCORE, config=UNCORE_ON)
    assert [(a.kind, a.container) for a in ledger.anomalies] == [("uncore_split", None)]


def test_uncore_split_near_miss() -> None:
    split = pod("a", ctr("app", [2, 3, 4, 5]))
    # Another pod holds a CPU of each cache: the split was the only way.
    others = pod("b", ctr("app", [0]), ctr("side", [7]))
    assert kinds(run(split, others, topo=UNCORE, config=UNCORE_ON)) == []
    # A whole cache and the rest in one other cache is aligned.
    assert kinds(run(pod("a", ctr("app", [0, 1, 2, 3, 4, 5])), topo=UNCORE,
                     config=UNCORE_ON)) == []
    # The option off, or unknown cache ids: nothing to judge.
    assert kinds(run(split, topo=UNCORE, config=_options())) == []
    assert kinds(run(split, topo=TOPO, config=UNCORE_ON)) == []


# -- memory_over_budget -------------------------------------------------------------------

def test_memory_over_budget_raised_for_pod_blocks_over_spec() -> None:
    spec = pspec("a", cspec("app", "2", "2Gi"), budget="3", budget_memory="4Gi")
    ledger = run(pod("a", ctr("app", [2, 3], [mem(2 * GI)]), ctr("proxy"), cpus=[2, 3, 4],
                     memory=[mem(6 * GI)]), topo=TOPO, specs=[spec])
    assert kinds(ledger) == ["memory_over_budget"]


def test_memory_over_budget_raised_for_containers_over_pod() -> None:
    ledger = run(pod("a", ctr("app", [2, 3], [mem(8 * GI)]), ctr("proxy"), cpus=[2, 3, 4],
                     memory=[mem(6 * GI)]), topo=TOPO)
    assert kinds(ledger) == ["memory_over_budget"]
    pools = dict(ledger.memory_pools)["memory"]
    assert pools == (0, 8 * GI, 0)


def test_memory_over_budget_near_miss() -> None:
    spec = pspec("a", cspec("app", "2", "2Gi"), budget="3", budget_memory="6Gi")
    ledger = run(pod("a", ctr("app", [2, 3], [mem(2 * GI)]), ctr("proxy"), cpus=[2, 3, 4],
                     memory=[mem(6 * GI)]), topo=TOPO, specs=[spec])
    assert kinds(ledger) == []
    assert dict(ledger.memory_pools)["memory"] == (0, 2 * GI, 4 * GI)


# -- general ------------------------------------------------------------------------------

def test_anomaly_kinds_are_known_and_json_ready() -> None:
    ledger = run(pod("a", ctr("app", [2, 99]), cpus=[2]),
                 pod("b", ctr("x", [2]), ctr("y", [4]), ctr("z", [4])), topo=TOPO)
    for a in ledger.anomalies:
        assert a.kind in ANOMALY_KINDS
        assert set(a.to_json()) == {"kind", "namespace", "pod", "container", "detail"}
        assert a.detail
    counts = ledger.anomaly_counts()
    assert set(counts) >= set(ANOMALY_KINDS)
    assert sum(counts.values()) == len(ledger.anomalies)


# -- order --------------------------------------------------------------------------------

def test_every_kind_has_one_place_in_the_order() -> None:
    order = REPORT_ORDER + POD_ORDER
    assert sorted(order) == sorted(get_args(AnomalyKind))
    assert len(set(order)) == len(order)
    assert set(ANOMALY_KINDS) <= set(order)


def test_report_anomalies_come_first_then_pod_by_pod_in_kind_order() -> None:
    spec = pspec("a", cspec("app", "2"), cspec("side", "1"), budget="2", budget_memory="1Gi")
    ledger = run(pod("a", ctr("app", [2, 3]), ctr("side", [5]), cpus=[2, 3, 4],
                     memory=[mem(2 * GI)]),
                 pod("b", ctr("x", [99])),
                 pod("c", ctr("app", [6, 77])), topo=TOPO, specs=[spec])
    assert [(a.kind, a.pod) for a in ledger.anomalies] == [
        ("unknown_cpu", "b"), ("unknown_cpu", "c"),  # what is wrong with the report itself
        ("container_outside_pod", "a"), ("budget_mismatch", "a"),
        ("memory_over_budget", "a")]


def test_the_log_orders_whatever_order_checks_report_in() -> None:
    def a(kind: AnomalyKind, pod: str, detail: str = "") -> Anomaly:
        return Anomaly(kind, "ns", pod, None, detail or kind)

    log = AnomalyLog()
    log.extend(1, [a("memory_over_budget", "q"), a("exclusive_overlap", "q")])
    log.extend(0, [a("missing_exclusive", "p", "second"), a("unknown_cpu", "p")])
    log.extend(0, [a("cpuset_drift", "p")])
    log.extend(1, [a("unknown_cpu", "q")])
    log.extend(0, [a("missing_exclusive", "p", "third")])
    assert [(x.pod, x.detail) for x in log.ordered()] == [
        ("p", "unknown_cpu"), ("q", "unknown_cpu"),
        ("p", "second"), ("p", "third"), ("p", "cpuset_drift"),
        ("q", "exclusive_overlap"), ("q", "memory_over_budget")]
    assert AnomalyLog().ordered() == ()


# -- cpuset_drift ---------------------------------------------------------------------------
# Raised against the kernel, not by reconcile() alone: the ledger's expectations compared
# with enforced cpusets over the persistence window (reconciler/enforcement.py).

def _drifts(enforced_app: frozenset[int]) -> list[Anomaly]:
    from reconciler.enforcement import DriftState, EnforcedCpusets, EnforcementOptions, observe

    ledger = run(pod("a", ctr("app", [2, 3]), ctr("proxy"), cpus=[2, 3, 4]), topo=TOPO)
    enforced = EnforcedCpusets({("default", "a", "app"): enforced_app,
                                ("default", "a", "proxy"): frozenset({4})})
    options = EnforcementOptions(reconcile_period=10.0)
    state, first = observe(DriftState(), ledger, enforced, options, 0.0)
    assert first == ()  # never on the first sight: the kubelet may still be catching up
    _, second = observe(state, ledger, enforced, options, 10.0)
    return [d.anomaly() for d in second]


def test_cpuset_drift_raised() -> None:
    found = _drifts(frozenset({2, 3, 4}))
    assert [a[:4] for a in found] == [("cpuset_drift", "default", "a", "app")]
    assert "4" in found[0].detail


def test_cpuset_drift_near_miss() -> None:
    assert _drifts(frozenset({2, 3})) == []


def test_missing_exclusive_not_raised_for_pod_level_pods_with_the_gate_off() -> None:
    # Without PodLevelResourceManagers the kubelet's CPU manager skips a pod with pod-level
    # resources: its containers are never pinned, so nothing is missing. Where the config
    # does not say, a reported pod block shows the gate on (the test above).
    spec = pspec("a", cspec("app", "2"), budget="3", sidecars=[cspec("proxy", sidecar=True)])
    off = KubeletConfig(cpu_manager_policy="static", topology_manager_policy="single-numa-node",
                        topology_manager_scope="pod",
                        feature_gates=(("PodLevelResourceManagers", False),))
    ledger = run(pod("a", ctr("proxy"), ctr("app")), topo=TOPO, specs=[spec], config=off)
    assert "missing_exclusive" not in kinds(ledger)
    ledger = run(pod("a", ctr("proxy"), ctr("app")), topo=TOPO, specs=[spec], config=STATIC)
    assert "missing_exclusive" not in kinds(ledger)  # unknown gate, no block reported
    on = KubeletConfig(cpu_manager_policy="static", topology_manager_policy="single-numa-node",
                       topology_manager_scope="pod",
                       feature_gates=(("PodLevelResourceManagers", True),))
    ledger = run(pod("a", ctr("proxy"), ctr("app")), topo=TOPO, specs=[spec], config=on)
    assert [a.container for a in ledger.anomalies if a.kind == "missing_exclusive"] == ["app"]


# -- device_numa_misaligned (more in test_devices.py) ------------------------------------

def _gpu_pod(gpu_numa: int) -> PodAlloc:
    return PodAlloc("default", "trainer", (ContainerAlloc(
        "train", (1, 2), (), (DeviceAlloc("nvidia.com/gpu", ("GPU-0",), (gpu_numa,)),)),))


def test_device_numa_misaligned_raised() -> None:
    config = KubeletConfig(cpu_manager_policy="static", topology_manager_policy="best-effort")
    ledger = run(_gpu_pod(1), topo=TWO_NUMA, config=config)
    assert kinds(ledger) == ["device_numa_misaligned"]
    assert ledger.anomalies[0].container == "train"


def test_device_numa_misaligned_near_miss() -> None:
    config = KubeletConfig(cpu_manager_policy="static", topology_manager_policy="best-effort")
    assert kinds(run(_gpu_pod(0), topo=TWO_NUMA, config=config)) == []
    # The same placement under single-numa-node: the kubelet would have refused it.
    assert kinds(run(_gpu_pod(1), topo=TWO_NUMA,
                     config=replace(config, topology_manager_policy="single-numa-node"))) == []
