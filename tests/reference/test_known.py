"""The known disagreements (tests/reference/known.py), each shrunk to a small case and run
through the kubelet version it was found with. The kubelet's side is asserted as found; the
model's side is a strict xfail, so a model change that closes one shows up here."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bench.reference import Case, Reference, run_case, setup_request
from reconciler.allocator import CPUTopology, ModelConfig, NodeModel
from reconciler.allocator.placement import PodPlacement
from reconciler.allocator.report import pod_to_json
from reconciler.cpuset import parse_cpuset
from reconciler.kube import ContainerSpec, PodSpec, Resources
from reconciler.snapshot import CPUInfo
from tests.reference.known import KNOWN, classify

GiB = 2**30
GATES = {"CPUManagerPolicyAlphaOptions": True, "PodLevelResources": True}


def _topo(cpus: int) -> CPUTopology:
    """One socket, one NUMA node, no SMT: each CPU its own core."""
    return CPUTopology(cpus=tuple(CPUInfo(i, i, 0, 0) for i in range(cpus)),
                       memory=((0, 8 * GiB),))


def _g(cpu_m: int) -> Resources:
    return Resources(cpu_m, cpu_m, 64 * 2**20, 64 * 2**20)


def _case(version: str, scope: str, pod_level: bool, pod: PodSpec, *, restart: bool = False,
          policy: str = "single-numa-node") -> Case:
    gates = dict(GATES)
    if version != "1.35":
        gates["PodLevelResourceManagers"] = pod_level
    config = ModelConfig(topology_policy=policy, scope=scope, memory_policy="None",
                         reserved_cpu_m=1000, pod_level=pod_level)
    case = Case(0, _topo(6), config, gates, [("admit", pod)])
    if restart:
        case.ops.append(("restart", None))
    return case


GATE_OFF_POD = PodSpec("ref", "gate-off", "uid-gate-off", (ContainerSpec("app", _g(2000)),),
                       resources=_g(2000))
RESTART_POD = PodSpec("ref", "restart", "uid-restart",
                      (ContainerSpec("app", _g(1000)), ContainerSpec("side")),
                      resources=_g(3000))
SHARED_POD = PodSpec("ref", "shared", "uid-shared",
                     (ContainerSpec("app", _g(2000)), ContainerSpec("side")), resources=_g(2000))

# (known kind, kubelet version found with, case)
FIXTURES = [
    ("pod-level-resources-gate-off", "1.35", _case("1.35", "container", False, GATE_OFF_POD)),
    ("pod-level-resources-gate-off", "1.36", _case("1.36", "container", False, GATE_OFF_POD)),
    ("pod-level-resources-gate-off", "1.37", _case("1.37", "pod", False, GATE_OFF_POD)),
    ("restart-readmission", "1.37", _case("1.37", "pod", True, RESTART_POD, restart=True)),
    ("container-scope-pod-level", "1.37", _case("1.37", "container", True, SHARED_POD)),
    ("topology-none-pod-level", "1.37", _case("1.37", "pod", True, RESTART_POD, policy="none")),
]
IDS = [f"{kind}-{version}" for kind, version, _ in FIXTURES]


@pytest.mark.parametrize(("kind", "version", "case"), FIXTURES, ids=IDS)
def test_the_kubelet_does_what_was_found(kind: str, version: str, case: Case,
                                         need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    assert kind in KNOWN
    pod = case.ops[0][1]
    assert pod is not None
    with Reference(version) as ref:
        assert ref.request(setup_request(case))["ok"]
        admitted = ref.request({"op": "admit", "pod": pod_to_json(pod)})
        assert admitted["ok"], admitted.get("error")
        state = admitted["state"]
        held = state["containers"].get(pod.uid, {})
        if kind == "pod-level-resources-gate-off":
            assert held == {}
            assert parse_cpuset(state["default"]) == case.topo.online
        elif kind == "topology-none-pod-level":
            # No pod-level block: the exclusive container is placed on its own.
            assert pod.uid not in state["pods"] and parse_cpuset(held["app"])
        elif kind == "container-scope-pod-level":
            assert parse_cpuset(held["app"]) and "side" not in held
        else:
            assert state["pods"][pod.uid]
            again = ref.request({"op": "restart"})
            assert [r["admitted"] for r in again["readmitted"]] == [False]
            assert "pod-level resources" in again["readmitted"][0]["message"]
        # The same case through the differential comparison is this known kind.
        outcome = run_case(ref, case)
    assert not outcome.agrees
    assert classify(outcome) == kind


@pytest.mark.xfail(strict=True, reason="known disagreement: the model differs (known.py)")
@pytest.mark.parametrize(("kind", "version", "case"), FIXTURES, ids=IDS)
def test_the_model_does_the_same(kind: str, version: str, case: Case,
                                 need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    with Reference(version) as ref:
        outcome = run_case(ref, case)
    assert outcome.agrees, outcome.disagreements


def test_the_model_pins_a_gate_off_pod_level_pod() -> None:
    """The model's side of the first known disagreement, without Go: it still pins."""
    model = NodeModel(_topo(6), ModelConfig(scope="container", memory_policy="None",
                                            reserved_cpu_m=1000, pod_level=False))
    placed = model.admit(GATE_OFF_POD)
    assert isinstance(placed, PodPlacement)
    assert len(placed.containers[0].exclusive) == 2


# ---- closed disagreements, kept as regression fixtures ------------------------------------


def _smt_topo(cores: int) -> CPUTopology:
    """One socket, one NUMA node, two threads per core numbered as Linux does (the sibling
    of CPU i is i + cores); each core named after its lowest CPU."""
    return CPUTopology(cpus=tuple(CPUInfo(t * cores + i, i, 0, 0) for t in range(2)
                                  for i in range(cores)), memory=((0, 8 * GiB),))


def _two_numa_topo() -> CPUTopology:
    """Two NUMA nodes of four CPUs on two sockets, no SMT."""
    return CPUTopology(cpus=tuple(CPUInfo(i, i, i // 4, i // 4) for i in range(8)),
                       memory=((0, 8 * GiB), (1, 8 * GiB)))


def _closed(version: str, topo: CPUTopology, config: ModelConfig, *pods: PodSpec) -> Case:
    gates = dict(GATES)
    if version != "1.35":
        gates["PodLevelResourceManagers"] = config.pod_level
    return Case(0, topo, config, gates, [("admit", p) for p in pods])


# The kubelet picks the CPUs it reserves itself with the take its options choose: spread
# over cores under distribute-cpus-across-cores (policy_static.go NewStaticPolicy), so
# 2000m reserves CPUs 0 and 1, not the siblings 0 and 5. Found on 1.35.4, 1.36.3, 1.37.2
# (seed 555001697 of 1.35) as "distribute-cpus-across-cores".
SPREAD_RESERVED = _closed(
    "1.35", _smt_topo(5),
    ModelConfig(topology_policy="best-effort", scope="pod", memory_policy="None",
                options=frozenset({"distribute-cpus-across-cores"}), reserved_cpu_m=2000,
                pod_level=False),
    PodSpec("ref", "spread", "uid-spread", (ContainerSpec("app", _g(3000)),)))
# A CPU reusable from an init container narrows the next container's hints to masks that
# hold its NUMA node (policy_static.go generateCPUTopologyHints): the app container lands
# on the init container's node, not on the fuller node 0. Found on 1.36.3 and 1.37.2 (seeds
# 777002441 of 1.36, 777002597 of 1.37) as "distribute-cpus-across-cores".
REUSABLE_HINT = _closed(
    "1.37", _two_numa_topo(),
    ModelConfig(topology_policy="best-effort", scope="container", memory_policy="None",
                reserved_cpu_m=1000),
    PodSpec("ref", "reuse", "uid-reuse", (ContainerSpec("app", _g(1000)),),
            init_containers=(ContainerSpec("init", _g(4000), init=True),)))
# The topology manager's fitter mask of one width is the smaller bitmask: with NUMA nodes
# {0,3} and {1,2} both preferred for 5 CPUs the pod goes to {1,2} (bitmask.IsNarrowerThan).
# Found on 1.35.4 (seed 777002527 of 1.35) as a new disagreement.
BITMASK_ORDER = _closed(
    "1.35", CPUTopology(cpus=tuple(CPUInfo(i, i, 0, i // 4) for i in range(16)),
                        memory=tuple((n, 8 * GiB) for n in range(4))),
    ModelConfig(topology_policy="restricted", scope="pod", memory_policy="None",
                reserved_cpus=frozenset({1, 2, 3, 4, 8}), pod_level=False),
    PodSpec("ref", "mask", "uid-mask", (ContainerSpec("app", _g(5000)),)))
# full-pcpus-only counts the default set less the reserved cores, also without SMT; the
# CPUs an init container left to reuse are not in it (policy_static.go
# enforceSMTAlignment). Found on 1.36.3 and 1.37.2 (seed 555001818 of 1.37) as
# "full-pcpus-only-free-cores".
SMT_DEFAULT_SET = _closed(
    "1.37", _topo(6),
    ModelConfig(topology_policy="single-numa-node", memory_policy="None",
                options=frozenset({"full-pcpus-only"}), reserved_cpu_m=1000),
    PodSpec("ref", "smt", "uid-smt",
            (ContainerSpec("app1", _g(1000)), ContainerSpec("app2", _g(4000))),
            init_containers=(ContainerSpec("init0", _g(3000), init=True),)))
# The kubelet keeps its best NUMA-node combination as a Go slice that later combinations
# write into (iterateCombinations): of four one-CPU nodes balancing equally it takes
# {3,4,5,7}, not the first, {3,4,5,6}. Found on 1.36.3 (seed 31337094096 of 1.36, pods
# without pod-level resources) as a new disagreement.
def _aliased(version: str) -> Case:
    return _closed(
        version, CPUTopology(cpus=tuple(CPUInfo(i, i, i // 4, i) for i in range(8)),
                             memory=tuple((n, GiB) for n in range(8))),
        ModelConfig(memory_policy="None", reserved_cpus=frozenset({0, 1, 2}),
                    options=frozenset({"distribute-cpus-across-numa"}),
                    kubelet_version=version),
        PodSpec("ref", "combo", "uid-combo", (ContainerSpec("app", _g(4000)),)))


def _align_by_socket(version: str) -> Case:
    """policy_static_test.go TestPolicyWithAlignBySocketAndDistributeCPUsAcrossNUMAEnabled
    (v1.37.2), its first case, on topoDualSocketMultiNumaPerSocketHTType2 with the CPUs
    outside its default set reserved. 1.37.2 keeps the container on socket 1; 1.35 and
    1.36 spread it over NUMA nodes 1 and 2 (the model follows kubelet_version)."""
    topo = CPUTopology(cpus=tuple(CPUInfo(i, i % 40, i % 2, i % 4) for i in range(80)),
                       memory=tuple((n, 8 * GiB) for n in range(4)))
    config = ModelConfig(memory_policy="None", reserved_cpus=frozenset(range(80)) - set(
                             range(1, 16)), pod_level=False, kubelet_version=version,
                         options=frozenset({"distribute-cpus-across-numa",
                                            "align-by-socket"}))
    return _closed(version, topo, config,
                   PodSpec("ref", "abs", "uid-abs", (ContainerSpec("app", _g(6000)),)))


CLOSED = [
    ("align-by-socket-distributed", "1.36", _align_by_socket("1.36")),
    ("align-by-socket-distributed", "1.37", _align_by_socket("1.37")),
    ("aliased-combination", "1.35", _aliased("1.35")),
    ("aliased-combination", "1.36", _aliased("1.36")),
    ("aliased-combination", "1.37", _aliased("1.37")),
    ("bitmask-order", "1.35", BITMASK_ORDER),
    ("bitmask-order", "1.37", BITMASK_ORDER),
    ("full-pcpus-default-set", "1.36", SMT_DEFAULT_SET),
    ("full-pcpus-default-set", "1.37", SMT_DEFAULT_SET),
    ("spread-reserved", "1.35", SPREAD_RESERVED),
    ("spread-reserved", "1.37", SPREAD_RESERVED),
    ("reusable-hint", "1.36", REUSABLE_HINT),
    ("reusable-hint", "1.37", REUSABLE_HINT),
]


@pytest.mark.parametrize(("what", "version", "case"), CLOSED,
                         ids=[f"{w}-{v}" for w, v, _ in CLOSED])
def test_closed_disagreements_stay_closed(what: str, version: str, case: Case,
                                          need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    with Reference(version) as ref:
        outcome = run_case(ref, case)
    assert outcome.agrees, outcome.disagreements


def test_the_model_reserves_with_the_spread_take() -> None:
    model = NodeModel(SPREAD_RESERVED.topo, SPREAD_RESERVED.config)
    assert model.reserved == {0, 1}
    placed = model.admit(SPREAD_RESERVED.ops[0][1])  # type: ignore[arg-type]
    assert isinstance(placed, PodPlacement)
    assert placed.containers[0].exclusive == {2, 3, 4}


def test_the_model_keeps_a_container_on_its_reusable_cpus_node() -> None:
    model = NodeModel(REUSABLE_HINT.topo, REUSABLE_HINT.config)
    placed = model.admit(REUSABLE_HINT.ops[0][1])  # type: ignore[arg-type]
    assert isinstance(placed, PodPlacement)
    assert placed.containers[0].exclusive == {4}
