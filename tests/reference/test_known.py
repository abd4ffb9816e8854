"""Disagreements the differential runs found between the kubelet and the model, each shrunk to
a small case and run through the kubelet version it was found with. The kubelet's side is
asserted as found (so a kubelet that changes shows up here), and the model must now do the
same: these were model bugs, closed by following the kubelet's code (docs/design.md#reference).
Kinds still open are in tests/reference/known.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from bench.reference import Case, Reference, run_case, setup_request
from reconciler.allocator import CPUTopology, ModelConfig, ModelError, NodeModel
from reconciler.allocator.placement import PodPlacement, Rejection
from reconciler.allocator.report import pod_to_json
from reconciler.allocator.restart import restart, start_error
from reconciler.cpuset import parse_cpuset
from reconciler.kube import ContainerSpec, PodSpec, Resources
from reconciler.snapshot import CPUInfo
from tests.reference.test_known_mixes import CASES as MIXES

GiB = 2**30
GATES = {"CPUManagerPolicyAlphaOptions": True, "PodLevelResources": True}


def _topo(cpus: int, threads: int = 1) -> CPUTopology:
    """One socket, one NUMA node; ``threads`` CPUs per core (siblings numbered apart)."""
    cores = cpus // threads
    return CPUTopology(cpus=tuple(CPUInfo(i, i % cores, 0, 0) for i in range(cpus)),
                       memory=((0, 8 * GiB),))


def _g(cpu_m: int) -> Resources:
    return Resources(cpu_m, cpu_m, 64 * 2**20, 64 * 2**20)


def _case(version: str, scope: str, pod_level: bool, *pods: PodSpec, restart: bool = False,
          policy: str = "single-numa-node", options: frozenset[str] = frozenset(),
          topo: CPUTopology | None = None) -> Case:
    gates = dict(GATES)
    if version != "1.35":
        gates["PodLevelResourceManagers"] = pod_level
    config = ModelConfig(topology_policy=policy, scope=scope, memory_policy="None",
                         reserved_cpu_m=1000, pod_level=pod_level, options=options)
    case = Case(0, topo or _topo(6), config, gates, [("admit", p) for p in pods])
    if restart:
        case.ops.append(("restart", None))
    return case


GATE_OFF_POD = PodSpec("ref", "gate-off", "uid-gate-off", (ContainerSpec("app", _g(2000)),),
                       resources=_g(2000))
RESTART_POD = PodSpec("ref", "restart", "uid-restart",
                      (ContainerSpec("app", _g(1000)), ContainerSpec("side")),
                      resources=_g(3000))
ALL_EXCLUSIVE_POD = PodSpec("ref", "allex", "uid-allex",
                            (ContainerSpec("a", _g(1000)), ContainerSpec("b", _g(1000))),
                            resources=_g(2000))
SHARED_POD = PodSpec("ref", "shared", "uid-shared",
                     (ContainerSpec("app", _g(2000)), ContainerSpec("side")), resources=_g(2000))
# An init container asking more than the pod budget: the block is taken, carving fails.
BIG_INIT_POD = PodSpec("ref", "big-init", "uid-big-init", (ContainerSpec("app"),),
                       (ContainerSpec("init", _g(2000), init=True),), resources=_g(1000))
TWO_CPU_POD = PodSpec("ref", "two", "uid-two", (ContainerSpec("app", _g(2000)),))
THREE_CPU_POD = PodSpec("ref", "three", "uid-three", (ContainerSpec("app", _g(3000)),))
FOUR_CPU_POD = PodSpec("ref", "four", "uid-four", (ContainerSpec("app", _g(4000)),))
ONE_CPU_SLICE_POD = PodSpec("ref", "slice", "uid-slice",
                            (ContainerSpec("app", _g(1000)), ContainerSpec("side")),
                            resources=_g(4000))
STRICT = frozenset({"strict-cpu-reservation"})
# Under strict reservation on four CPUs, a refused carving leaks the three unreserved ones:
# the default set is empty and no container holds a CPU.
LEAK_ALL_POD = PodSpec("ref", "leak-all", "uid-leak-all", (ContainerSpec("app"),),
                       (ContainerSpec("init", _g(4000), init=True),), resources=_g(3000))
FULL = frozenset({"full-pcpus-only"})


def _gate_off(answers: list[dict[str, Any]], case: Case) -> None:
    state = answers[0]["state"]
    assert state["containers"].get(GATE_OFF_POD.uid, {}) == {}
    assert parse_cpuset(state["default"]) == case.topo.online


def _refused_again(answers: list[dict[str, Any]], case: Case) -> None:
    assert answers[0]["state"]["pods"][RESTART_POD.uid]
    again = answers[-1]
    assert [r["admitted"] for r in again["readmitted"]] == [False]
    assert parse_cpuset(again["state"]["default"]) == case.topo.online


def _moved_and_leaked(answers: list[dict[str, Any]], case: Case) -> None:
    before = parse_cpuset(answers[0]["state"]["pods"][ALL_EXCLUSIVE_POD.uid])
    again = answers[-1]
    assert [r["admitted"] for r in again["readmitted"]] == [True]
    after = parse_cpuset(again["state"]["pods"][ALL_EXCLUSIVE_POD.uid])
    default = parse_cpuset(again["state"]["default"])
    assert after and not after & before  # a new block...
    assert not before & default  # ...and the old one in neither


def _container_scope(answers: list[dict[str, Any]], case: Case) -> None:
    state = answers[0]["state"]
    held = state["containers"][SHARED_POD.uid]
    assert parse_cpuset(held["app"]) and "side" not in held
    assert SHARED_POD.uid not in state["pods"]


def _none_policy(answers: list[dict[str, Any]], case: Case) -> None:
    state = answers[0]["state"]
    assert RESTART_POD.uid not in state["pods"]
    assert parse_cpuset(state["containers"][RESTART_POD.uid]["app"])


def _block_leaked(answers: list[dict[str, Any]], case: Case) -> None:
    refused = answers[0]
    assert not refused["ok"]
    # One CPU reserved, one block CPU gone from the default set for good.
    assert len(parse_cpuset(refused["state"]["default"])) == len(case.topo.online) - 1


def _cannot_start(answers: list[dict[str, Any]], case: Case) -> None:
    again = answers[-1]
    assert not again["ok"] and "default cpuset cannot be empty" in again["error"]


def _fresh_after_leak(answers: list[dict[str, Any]], case: Case) -> None:
    refused, again = answers
    assert not refused["ok"] and parse_cpuset(refused["state"]["default"]) == frozenset()
    # validateState sees an empty default set and no container entry: a fresh state, every
    # unreserved CPU back in the default set, the leaked pod entry still in the file.
    assert again["ok"] and parse_cpuset(again["state"]["default"]) == {1, 2, 3}
    assert parse_cpuset(again["state"]["pods"][LEAK_ALL_POD.uid]) == {1, 2, 3}


def _fresh_after_restart_leak(answers: list[dict[str, Any]], case: Case) -> None:
    moved, gone, refused, again = answers[1:]
    # The first restart moves P's block (the old one leaks); once P is gone and Q's refused
    # carving leaks the rest, the default set is empty with no container entry: the second
    # restart starts fresh, the CPUs the first restart leaked included.
    assert [r["admitted"] for r in moved["readmitted"]] == [True]
    assert parse_cpuset(gone["state"]["default"]) == {3, 4}
    assert not refused["ok"] and parse_cpuset(refused["state"]["default"]) == frozenset()
    assert again["ok"] and parse_cpuset(again["state"]["default"]) == {1, 2, 3, 4}


def _restart_leak_case(version: str) -> Case:
    p = PodSpec("ref", "P", "uid-P", (ContainerSpec("c0", _g(2000)),), resources=_g(2000))
    q = PodSpec("ref", "Q", "uid-Q", (ContainerSpec("c0", _g(2000)), ContainerSpec("c1", _g(1000))),
                resources=_g(2000))
    case = _case(version, "pod", True, p, restart=True, options=STRICT, policy="best-effort",
                 topo=_topo(5))
    case.ops += [("remove", p), ("admit", q), ("restart", None)]
    return case


def _smt_at_restart(answers: list[dict[str, Any]], case: Case) -> None:
    again = answers[-1]
    # The first pod holds two of the three free cores, the second the last: the reserved
    # CPU's core is all that is free at the restart, so the first is refused, and then the
    # second fits in what the first gave back.
    assert [r["admitted"] for r in again["readmitted"]] == [False, True]
    assert again["readmitted"][0]["reason"] == "SMTAlignmentError"


def _slice_not_smt(answers: list[dict[str, Any]], case: Case) -> None:
    state = answers[0]["state"]
    assert len(parse_cpuset(state["containers"][ONE_CPU_SLICE_POD.uid]["app"])) == 1


# ---- from the CPU take, the hints and full-pcpus-only ------------------------------------


def _closed(version: str, topo: CPUTopology, config: ModelConfig, *pods: PodSpec) -> Case:
    gates = dict(GATES)
    if version != "1.35":
        gates["PodLevelResourceManagers"] = config.pod_level
    return Case(0, topo, config, gates, [("admit", p) for p in pods])


def _holds(cpus: set[int]) -> Callable[[list[dict[str, Any]], Case], None]:
    """The check that the case's container ``app`` holds ``cpus``."""
    def check(answers: list[dict[str, Any]], case: Case) -> None:
        pod = case.ops[0][1]
        assert pod is not None and answers[0]["ok"], answers[0].get("error")
        assert parse_cpuset(answers[0]["state"]["containers"][pod.uid]["app"]) == cpus
    return check


def _smt_refused(answers: list[dict[str, Any]], case: Case) -> None:
    assert not answers[0]["ok"]
    assert "available physical CPUs = 2, requested CPUs = 4" in answers[0]["error"]


# The kubelet picks the CPUs it reserves itself with the take its options choose: spread
# over cores under distribute-cpus-across-cores (policy_static.go NewStaticPolicy), so
# 2000m reserves CPUs 0 and 1, not the siblings 0 and 5. Found on 1.35.4, 1.36.3, 1.37.2
# (seed 555001697 of 1.35) as "distribute-cpus-across-cores".
SPREAD_RESERVED = _closed(
    "1.35", _topo(10, 2),
    ModelConfig(topology_policy="best-effort", scope="pod", memory_policy="None",
                options=frozenset({"distribute-cpus-across-cores"}), reserved_cpu_m=2000,
                pod_level=False),
    PodSpec("ref", "spread", "uid-spread", (ContainerSpec("app", _g(3000)),)))
# A CPU reusable from an init container narrows the next container's hints to masks that
# hold its NUMA node (policy_static.go generateCPUTopologyHints): the app container lands
# on the init container's node, not on the fuller node 0. Found on 1.36.3 and 1.37.2 (seeds
# 777002441 of 1.36, 777002597 of 1.37) as "distribute-cpus-across-cores".
REUSABLE_HINT = _closed(
    "1.37", CPUTopology(cpus=tuple(CPUInfo(i, i, i // 4, i // 4) for i in range(8)),
                        memory=((0, 8 * GiB), (1, 8 * GiB))),
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
                options=FULL, reserved_cpu_m=1000),
    PodSpec("ref", "smt", "uid-smt",
            (ContainerSpec("app1", _g(1000)), ContainerSpec("app2", _g(4000))),
            init_containers=(ContainerSpec("init0", _g(3000), init=True),)))


# prefer-closest-numa-nodes (issue 32): four NUMA nodes of two CPUs whose distances make
# {0,2} and {1,3} the close pairs. Three CPUs need two nodes; of the equally wide masks the
# kubelet picks the closest, {0,2} (ties to the smaller bitmask), where without the option
# it picks {0,1}. CPU 0 is reserved.
CLOSE_DISTANCES = ((0, (10, 21, 12, 30)), (1, (21, 10, 30, 12)), (2, (12, 30, 10, 21)),
                   (3, (30, 12, 21, 10)))


def _closest(version: str, closest: bool) -> Case:
    topo = CPUTopology(cpus=tuple(CPUInfo(i, i, 0, i // 2) for i in range(8)),
                       memory=tuple((n, GiB) for n in range(4)), distances=CLOSE_DISTANCES)
    return _closed(version, topo,
                   ModelConfig(topology_policy="best-effort", memory_policy="None",
                               reserved_cpu_m=1000, prefer_closest_numa=closest,
                               kubelet_version=version),
                   PodSpec("ref", "close", "uid-close", (ContainerSpec("app", _g(3000)),)))


def _aliased(version: str) -> Case:
    """The kubelet keeps its best NUMA-node combination as a Go slice that later
    combinations write into (iterateCombinations): of four one-CPU nodes balancing equally
    it takes {3,4,5,7}, not the first, {3,4,5,6}. Found on 1.36.3 (seed 31337094096 of
    1.36, pods without pod-level resources) as a new disagreement."""
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



# (what the kubelet does, the version it was found with, case, the check of its answers)
REGRESSIONS: list[tuple[str, str, Case, Callable[[list[dict[str, Any]], Case], None]]] = [
    ("pod-level-resources-gate-off", "1.35",
     _case("1.35", "container", False, GATE_OFF_POD), _gate_off),
    ("pod-level-resources-gate-off", "1.36",
     _case("1.36", "container", False, GATE_OFF_POD), _gate_off),
    ("pod-level-resources-gate-off", "1.37", _case("1.37", "pod", False, GATE_OFF_POD),
     _gate_off),
    ("restart-refuses-pod-shared-pool", "1.37",
     _case("1.37", "pod", True, RESTART_POD, restart=True), _refused_again),
    ("restart-refuses-pod-shared-pool", "1.36",
     _case("1.36", "pod", True, RESTART_POD, restart=True, policy="best-effort"),
     _refused_again),
    ("restart-moves-block", "1.37",
     _case("1.37", "pod", True, ALL_EXCLUSIVE_POD, restart=True), _moved_and_leaked),
    ("restart-moves-block", "1.36",
     _case("1.36", "pod", True, ALL_EXCLUSIVE_POD, restart=True, policy="best-effort"),
     _moved_and_leaked),
    ("container-scope-pod-level", "1.37", _case("1.37", "container", True, SHARED_POD),
     _container_scope),
    ("topology-none-pod-level", "1.37",
     _case("1.37", "pod", True, RESTART_POD, policy="none"), _none_policy),
    ("refused-pod-level-leak", "1.37", _case("1.37", "pod", True, BIG_INIT_POD),
     _block_leaked),
    ("refused-pod-level-leak", "1.36", _case("1.36", "pod", True, BIG_INIT_POD),
     _block_leaked),
    # Found by the runner, 1.36 seed 777001 (case 777003331105).
    ("leaked-blocks-only-restart-fresh", "1.36",
     _case("1.36", "pod", True, LEAK_ALL_POD, restart=True, options=STRICT,
           policy="restricted", topo=_topo(4)), _fresh_after_leak),
    ("leaked-blocks-only-restart-fresh", "1.37",
     _case("1.37", "pod", True, LEAK_ALL_POD, restart=True, options=STRICT,
           policy="restricted", topo=_topo(4)), _fresh_after_leak),
    # Issue 32, M1 (a review's reproduction, on a node the kubelet starts with: one CPU
    # reserved, strict-cpu-reservation, so the default set can empty).
    ("restart-leak-then-fresh-start", "1.36", _restart_leak_case("1.36"),
     _fresh_after_restart_leak),
    ("restart-leak-then-fresh-start", "1.37", _restart_leak_case("1.37"),
     _fresh_after_restart_leak),
    ("strict-reservation-full-node-cannot-restart", "1.37",
     _case("1.37", "container", False, TWO_CPU_POD, THREE_CPU_POD, restart=True,
           options=STRICT, policy="best-effort"), _cannot_start),
    ("full-pcpus-only-checked-again-at-restart", "1.35",
     _case("1.35", "container", False, FOUR_CPU_POD, TWO_CPU_POD, restart=True,
           options=FULL, policy="best-effort", topo=_topo(8, 2)), _smt_at_restart),
    ("full-pcpus-only-not-for-slices", "1.37",
     _case("1.37", "pod", True, ONE_CPU_SLICE_POD, options=FULL, policy="best-effort",
           topo=_topo(12, 2)), _slice_not_smt),
    ("spread-reserved", "1.35", SPREAD_RESERVED, _holds({2, 3, 4})),
    ("spread-reserved", "1.37", SPREAD_RESERVED, _holds({2, 3, 4})),
    ("reusable-hint", "1.36", REUSABLE_HINT, _holds({4})),
    ("reusable-hint", "1.37", REUSABLE_HINT, _holds({4})),
    ("bitmask-order", "1.35", BITMASK_ORDER, _holds({5, 6, 7, 9, 10})),
    ("bitmask-order", "1.37", BITMASK_ORDER, _holds({5, 6, 7, 9, 10})),
    ("full-pcpus-default-set", "1.36", SMT_DEFAULT_SET, _smt_refused),
    ("full-pcpus-default-set", "1.37", SMT_DEFAULT_SET, _smt_refused),
    ("aliased-combination", "1.35", _aliased("1.35"), _holds({3, 4, 5, 7})),
    ("aliased-combination", "1.36", _aliased("1.36"), _holds({3, 4, 5, 7})),
    ("aliased-combination", "1.37", _aliased("1.37"), _holds({3, 4, 5, 7})),
    ("prefer-closest-numa-nodes", "1.35", _closest("1.35", True), _holds({1, 4, 5})),
    ("prefer-closest-numa-nodes", "1.37", _closest("1.37", True), _holds({1, 4, 5})),
    ("narrowest-without-prefer-closest", "1.37", _closest("1.37", False), _holds({1, 2, 3})),
    ("align-by-socket-distributed", "1.36", _align_by_socket("1.36"),
     _holds({1, 2, 5, 6, 9, 10})),
    ("align-by-socket-distributed", "1.37", _align_by_socket("1.37"),
     _holds({1, 3, 5, 7, 9, 11})),
]
REGRESSIONS += MIXES  # found on the device and memory mixes (test_known_mixes.py)
IDS = [f"{kind}-{version}" for kind, version, _, _ in REGRESSIONS]


def _answers(ref: Reference, case: Case) -> list[dict[str, Any]]:
    assert ref.request(setup_request(case))["ok"]
    out = []
    for op, pod in case.ops:
        if op == "admit" and pod is not None:
            out.append(ref.request({"op": "admit", "pod": pod_to_json(pod)}))
        elif op == "remove" and pod is not None:
            out.append(ref.request({"op": "remove", "pod_uid": pod.uid}))
        else:
            out.append(ref.request({"op": "restart"}))
    return out


@pytest.mark.parametrize(("kind", "version", "case", "check"), REGRESSIONS, ids=IDS)
def test_the_kubelet_does_what_was_found(
        kind: str, version: str, case: Case,
        check: Callable[[list[dict[str, Any]], Case], None],
        need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    with Reference(version) as ref:
        check(_answers(ref, case), case)


@pytest.mark.parametrize(("kind", "version", "case", "check"), REGRESSIONS, ids=IDS)
def test_the_model_does_the_same(kind: str, version: str, case: Case,
                                 check: Callable[[list[dict[str, Any]], Case], None],
                                 need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    with Reference(version) as ref:
        outcome = run_case(ref, case)
    assert outcome.agrees, outcome.disagreements


# The model's side, without Go: each case asserts what the kubelet was seen to do.

def _model(scope: str = "pod", policy: str = "single-numa-node", pod_level: bool = True,
           options: frozenset[str] = frozenset(), topo: CPUTopology | None = None
           ) -> NodeModel:
    return NodeModel(topo or _topo(6), ModelConfig(
        scope=scope, topology_policy=policy, memory_policy="None", reserved_cpu_m=1000,
        pod_level=pod_level, options=options))


def test_a_gate_off_pod_level_pod_gets_no_exclusive_cpus() -> None:
    placed = _model("container", pod_level=False).admit(GATE_OFF_POD)
    assert isinstance(placed, PodPlacement)
    assert not placed.containers[0].exclusive


def test_a_refused_carving_keeps_the_block_out_of_the_default_set() -> None:
    model = _model()
    before = model.default_set
    refused = model.admit(BIG_INIT_POD)
    assert isinstance(refused, Rejection) and len(refused.leaked) == 1
    assert model.default_set == before - refused.leaked
    # plan() alone changes nothing.
    model2 = _model()
    assert isinstance(model2.plan(BIG_INIT_POD), Rejection)
    assert model2.default_set == before


def test_a_restart_refuses_a_pod_on_its_shared_pool_and_moves_an_exclusive_one() -> None:
    model = _model()
    assert isinstance(model.admit(RESTART_POD), PodPlacement)
    result = restart(model)
    assert result.error is None and [r.admitted for r in result.readmitted] == [False]
    assert model.default_set == model.topo.online
    model = _model()
    first = model.admit(ALL_EXCLUSIVE_POD)
    assert isinstance(first, PodPlacement)
    result = restart(model)
    assert [r.admitted for r in result.readmitted] == [True]
    moved = model.pods[first.key].block
    assert moved and not moved & first.block and not first.block & model.default_set
    # The leaked CPUs are in no entry: the next restart fails as the kubelet's does.
    assert restart(model).error is not None


def test_the_strict_reservation_node_with_no_cpu_left_cannot_restart() -> None:
    model = _model("container", policy="best-effort", pod_level=False, options=STRICT)
    assert isinstance(model.admit(TWO_CPU_POD), PodPlacement)
    assert isinstance(model.admit(FOUR_CPU_POD), Rejection)  # 5 CPUs, 2 taken: 3 left
    assert restart(model).error is None
    assert isinstance(model.admit(THREE_CPU_POD), PodPlacement)
    assert restart(model).error == "cpu manager start: default cpuset cannot be empty"


def test_a_restart_with_only_leaked_blocks_starts_fresh() -> None:
    model = _model(policy="restricted", options=STRICT, topo=_topo(4))
    refused = model.admit(LEAK_ALL_POD)
    assert isinstance(refused, Rejection) and refused.leaked == {1, 2, 3}
    assert model.default_set == frozenset()
    assert restart(model).error is None
    assert model.default_set == {1, 2, 3}
    assert isinstance(model.admit(THREE_CPU_POD), PodPlacement)


def test_full_pcpus_only_is_checked_again_at_restart_before_137() -> None:
    for version, refused in (("1.35", True), ("1.36", True), ("1.37", False)):
        model = _model("container", "best-effort", False, FULL, _topo(8, 2))
        assert isinstance(model.admit(FOUR_CPU_POD), PodPlacement)
        assert isinstance(model.admit(TWO_CPU_POD), PodPlacement)
        result = restart(model, version)
        assert [r.admitted for r in result.readmitted] == [not refused, True], version


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


# Whole random cases that disagreed once, kept as they were found (python -m bench.reference
# seeds; docs/design.md#allocator). At a kubelet restart: hints from the CPUs held, init
# containers' slices still in the state, legacy pods refused again, pod blocks moved.
RESTART_SEEDS = [
    ("1.35", 31337094461), ("1.36", 31337094140), ("1.36", 31337094240),
    ("1.36", 31337094484), ("1.36", 777002488), ("1.36", 9001027036),
    ("1.37", 31337094077), ("1.37", 31337094119), ("1.37", 31337094436),
    ("1.37", 31337094479), ("1.37", 555001708), ("1.37", 777002367),
]
# An uncore cache across two NUMA nodes, listed twice by sortAvailableUncoreCaches and taken
# twice by takeFullUncore: the kubelet pins 2 CPUs for a 4-CPU request.
UNCORE_SEEDS = [("1.35", 20261263785491), ("1.37", 20261263785523)]
SEEDS = RESTART_SEEDS + UNCORE_SEEDS


@pytest.mark.parametrize(("version", "seed"), SEEDS, ids=[f"{v}-{s}" for v, s in SEEDS])
def test_cases_the_runner_found(version: str, seed: int,
                                need_reference: Callable[[str], None]) -> None:
    from bench.reference import random_case
    need_reference(version)
    case = random_case(seed, version, topology_options=False)
    with Reference(version) as ref:
        outcome = run_case(ref, case)
    assert outcome.agrees, outcome.disagreements


def test_a_cache_across_numa_nodes_is_counted_twice() -> None:
    """The model's side of the uncore seeds, without Go: 4 CPUs asked, 2 pinned."""
    from bench.reference import random_case
    case = random_case(20261263785491, "1.35", topology_options=False)
    model = NodeModel(case.topo, case.config)
    pod = case.ops[0][1]
    assert pod is not None and pod.containers[0].resources.integer_cpus == 4
    placed = model.admit(pod)
    assert isinstance(placed, PodPlacement)
    app = next(c for c in placed.containers if c.name == pod.containers[0].name)
    (cache,) = {case.topo.uncore_of[c] for c in app.exclusive}
    assert len(app.exclusive) == 2 and len(case.topo.numa_set(app.exclusive)) == 2, cache


# Issue 32, M1: the model's side without Go. The first restart moves P's block and leaks
# the old one; the second, on an empty default set with no container entry, starts fresh.

def test_a_fresh_start_gives_back_what_an_earlier_restart_leaked() -> None:
    case = _restart_leak_case("1.37")
    model = NodeModel(case.topo, case.config)
    p, q = case.ops[0][1], case.ops[3][1]
    assert p is not None and q is not None
    assert isinstance(model.admit(p), PodPlacement)
    assert [r.admitted for r in restart(model).readmitted] == [True]
    model.release(p.namespace, p.name)
    assert isinstance(model.admit(q), Rejection) and model.default_set == frozenset()
    assert restart(model).error is None
    assert model.default_set == {1, 2, 3, 4}


# Issue 32, M2 and M3: a model started from the kubelet's checkpoint (from_checkpoint, as the
# exporter starts it from a live node's state).
CHECKPOINTED_POD = PodSpec("ref", "X", "uid-X",
                           (ContainerSpec("a", _g(2000)), ContainerSpec("b", _g(1000))))
CHECKPOINT_POLICIES = ("none", "best-effort", "single-numa-node")


def _checkpoint_config(version: str, policy: str, options: frozenset[str] = frozenset()
                       ) -> ModelConfig:
    return ModelConfig(topology_policy=policy, scope="container", memory_policy="None",
                       reserved_cpu_m=1000, pod_level=False, options=options,
                       kubelet_version=version)


def _from_state(state: dict[str, Any], config: ModelConfig) -> NodeModel:
    assignments = {uid: {name: parse_cpuset(s) for name, s in byname.items()}
                   for uid, byname in state["containers"].items()}
    return NodeModel.from_checkpoint(_topo(6), assignments, parse_cpuset(state["default"]),
                                     config)


@pytest.mark.parametrize("version", ["1.35", "1.36", "1.37"])
@pytest.mark.parametrize("policy", CHECKPOINT_POLICIES)
def test_a_checkpointed_container_keeps_its_cpus_when_admitted_again(
        version: str, policy: str, need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    config = _checkpoint_config(version, policy)
    with Reference(version) as ref:
        assert ref.request(setup_request(Case(0, _topo(6), config, GATES)))["ok"]
        first = ref.request({"op": "admit", "pod": pod_to_json(CHECKPOINTED_POD)})
        again = ref.request({"op": "restart"})
    assert first["ok"] and again["ok"]
    assert [r["admitted"] for r in again["readmitted"]] == [True]
    kept = again["state"]["containers"][CHECKPOINTED_POD.uid]
    assert kept == first["state"]["containers"][CHECKPOINTED_POD.uid]
    model = _from_state(first["state"], config)
    placed = model.admit(CHECKPOINTED_POD)
    assert isinstance(placed, PodPlacement), placed
    assert {c.name: parse_cpuset(kept[c.name]) for c in placed.containers} == \
        {c.name: c.exclusive for c in placed.containers}
    assert model.default_set == parse_cpuset(again["state"]["default"])
    assert not model.checkpointed  # the entries now belong to the placed pod
    model.release(CHECKPOINTED_POD.namespace, CHECKPOINTED_POD.name)
    assert model.default_set == model.topo.online


def test_a_checkpointed_container_is_not_allocated_twice() -> None:
    """The model's side of M2 without Go: the checkpoint the kubelet wrote above."""
    for policy in CHECKPOINT_POLICIES:
        model = NodeModel.from_checkpoint(_topo(6), {"uid-X": {"a": {1, 2}, "b": {3}}},
                                          {0, 4, 5}, _checkpoint_config("1.37", policy))
        placed = model.admit(CHECKPOINTED_POD)
        assert isinstance(placed, PodPlacement), (policy, placed)
        assert [c.exclusive for c in placed.containers] == [{1, 2}, {3}]
        assert model.default_set == {0, 4, 5}


STRICT_STATE_ERROR = ('cpu manager start: some of strictly reserved cpus: "0" are present in '
                      'defaultCpuSet: "0,4-5"')


@pytest.mark.parametrize("version", ["1.35", "1.36", "1.37"])
def test_strict_reservation_on_a_checkpoint_holding_reserved_cpus(
        version: str, need_reference: Callable[[str], None], tmp_path: Any) -> None:
    need_reference(version)
    before = _checkpoint_config(version, "none")
    after = _checkpoint_config(version, "none", STRICT)
    with Reference(version) as ref:
        setup = setup_request(Case(0, _topo(6), before, GATES))
        setup["setup"].update(state_dir=str(tmp_path), keep_state_dir=True)
        assert ref.request(setup)["ok"]
        first = ref.request({"op": "admit", "pod": pod_to_json(CHECKPOINTED_POD)})
        setup = setup_request(Case(0, _topo(6), after, GATES))
        setup["setup"].update(state_dir=str(tmp_path), keep_state_dir=True)
        refused = ref.request(setup)
    assert not refused["ok"] and refused["error"] == STRICT_STATE_ERROR
    assert start_error(_from_state(first["state"], after)) == STRICT_STATE_ERROR


def test_strict_reservation_names_the_reserved_cpus_in_the_checkpoint() -> None:
    """The model's side of M3 without Go."""
    model = NodeModel.from_checkpoint(_topo(6), {"uid-X": {"a": {1, 2}, "b": {3}}},
                                      {0, 4, 5}, _checkpoint_config("1.37", "none", STRICT))
    assert start_error(model) == STRICT_STATE_ERROR


def test_prefer_closest_numa_nodes_picks_the_closest_of_equally_wide_masks() -> None:
    """The model's side without Go; and a machine without distances cannot use the option,
    as the kubelet cannot ("error getting NUMA distances from cadvisor")."""
    for closest, want in ((True, {1, 4, 5}), (False, {1, 2, 3})):
        case = _closest("1.37", closest)
        placed = NodeModel(case.topo, case.config).admit(case.ops[0][1])  # type: ignore[arg-type]
        assert isinstance(placed, PodPlacement) and placed.containers[0].exclusive == want
    case = _closest("1.37", True)
    bare = CPUTopology(cpus=case.topo.cpus, memory=case.topo.memory)
    with pytest.raises(ModelError, match="NUMA distances"):
        NodeModel(bare, case.config)


def test_more_numa_nodes_than_the_limit_need_max_allowable_numa_nodes() -> None:
    topo = CPUTopology(cpus=tuple(CPUInfo(i, i, 0, i) for i in range(9)),
                       memory=tuple((n, GiB) for n in range(9)))
    config = ModelConfig(topology_policy="best-effort", memory_policy="None",
                         reserved_cpu_m=1000)
    with pytest.raises(ModelError, match="more than 8 NUMA Nodes"):
        NodeModel(topo, config)
    NodeModel(topo, ModelConfig(memory_policy="None", reserved_cpu_m=1000))  # policy none
    model = NodeModel(topo, replace(config, max_numa_nodes=9))
    # Past the default limit every mask is a hint again: two CPUs fit nodes {1,2}.
    placed = model.admit(TWO_CPU_POD)
    assert isinstance(placed, PodPlacement) and placed.containers[0].exclusive == {1, 2}
    with pytest.raises(ModelError, match="should not be less than 8"):
        ModelConfig(topology_policy="best-effort", max_numa_nodes=4)
    ModelConfig(max_numa_nodes=4)  # the none policy reads no option (test_options.py)


# Memory cases (the --memory mix, random_case(..., memory=True)) the runner found while the
# model learnt the memory manager (docs/design.md#memory-in-the-model): the init containers
# AddContainer drops (1000008) and a restart places again (1000036), the CPU block that leaks
# when AllocatePod fails on memory at a restart (1000007), the start check on a node under
# blocks of different NUMA sets (1000020), the sweep after a refusal (20261264783680).
MEMORY_SEEDS = [("1.37", 1000007), ("1.37", 1000008), ("1.37", 1000020), ("1.37", 1000036),
                ("1.35", 20261264783680)]


@pytest.mark.parametrize(("version", "seed"), MEMORY_SEEDS,
                         ids=[f"{v}-{s}" for v, s in MEMORY_SEEDS])
def test_memory_cases_the_runner_found(version: str, seed: int,
                                       need_reference: Callable[[str], None]) -> None:
    from bench.reference import random_case
    need_reference(version)
    with Reference(version) as ref:
        # As drawn when found: 1000020's first admission is over the generator's merge
        # budget now (bench/reference_budget.py); the kubelet answers it in about 6 s.
        outcome = run_case(ref, random_case(seed, version, memory=True, budget=False))
    assert outcome.agrees, outcome.disagreements
