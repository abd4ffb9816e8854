"""The CPU manager beyond placement against the kubelet's own code (bench/reference_cpu.py,
docs/design.md#reference): the PodResources answers after each step, the reconcile loop's
cpusets, and the ``none`` CPU policy, each on a small case whose answer is asserted as the
kubelet gives it, then through the differential's comparison with the model."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from bench.reference import Case, Reference, random_case, run_case, setup_request
from bench.reference_cpu import (
    compare_answers,
    compare_default,
    random_statuses,
    with_cpu_manager,
)
from reconciler.allocator import CPUTopology, ModelConfig, NodeModel
from reconciler.allocator.report import pod_to_json
from reconciler.cpuset import parse_cpuset
from reconciler.kube import ContainerSpec, PodSpec, Resources
from reconciler.snapshot import CPUInfo

GiB = 2**30
MiB = 2**20


def _topo(cpus: int = 6) -> CPUTopology:
    return CPUTopology(cpus=tuple(CPUInfo(i, i, 0, 0) for i in range(cpus)),
                       memory=((0, 8 * GiB),))


def _g(cpu_m: int) -> Resources:
    return Resources(cpu_m, cpu_m, 64 * MiB, 64 * MiB)


def _case(version: str, *ops: tuple[str, PodSpec | None], cpu_policy: str = "static",
          pod_level: bool = True, policy: str = "best-effort") -> Case:
    gates = {"PodLevelResources": True}
    if version != "1.35":
        gates["PodLevelResourceManagers"] = pod_level
    config = ModelConfig(cpu_policy=cpu_policy, topology_policy=policy, scope="pod",
                         memory_policy="None", reserved_cpu_m=1000,
                         pod_level=pod_level and version != "1.35", kubelet_version=version)
    return Case(0, _topo(), config, gates, list(ops))


BURST = PodSpec("ref", "burst", "uid-burst", (ContainerSpec("web", Resources(500, None, None,
                                                                              None)),))
TWO = PodSpec("ref", "two", "uid-two", (ContainerSpec("app", _g(2000)),))
# A pod-level budget: an exclusive app, a sidecar and a container on the pod's shared pool.
POOLED = PodSpec("ref", "pooled", "uid-pooled",
                 (ContainerSpec("app", _g(1000)), ContainerSpec("log")),
                 (ContainerSpec("proxy", Resources(), sidecar=True),), _g(3000))
# Two exclusive containers make the whole pod budget: a restart moves the block (1.36, 1.37).
ALL_EXCLUSIVE = PodSpec("ref", "allex", "uid-allex",
                        (ContainerSpec("a", _g(1000)), ContainerSpec("b", _g(1000))),
                        resources=_g(2000))
VERSIONS = ["1.35", "1.36", "1.37"]


def _run(ref: Reference, case: Case) -> list[dict[str, Any]]:
    answers = [ref.request(setup_request(case))]
    for op, pod in case.ops:
        if op == "admit" and pod is not None:
            answers.append(ref.request({"op": "admit", "pod": pod_to_json(pod)}))
        elif op == "restart":
            answers.append(ref.request({"op": "restart"}))
        elif op == "reconcile":
            statuses = {p.uid: {c.name: "running" for c in p.long_running}
                        for o, p in case.ops if o == "admit" and p is not None}
            answers.append(ref.request({"op": "reconcile", "statuses": statuses}))
    return answers


@pytest.mark.parametrize("version", VERSIONS)
def test_the_reconcile_loop_moves_a_shared_container_off_cpus_given_away(
        version: str, need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    case = _case(version, ("admit", BURST), ("reconcile", None), ("admit", TWO),
                 ("reconcile", None))
    with Reference(version) as ref:
        answers = _run(ref, case)
        assert run_case(ref, case).agrees
    first, second = answers[2]["reconciled"]["cpus"], answers[4]["reconciled"]["cpus"]
    assert parse_cpuset(first["uid-burst"]["web"]) == frozenset(range(6))
    exclusive = parse_cpuset(answers[4]["state"]["containers"]["uid-two"]["app"])
    assert len(exclusive) == 2
    assert parse_cpuset(second["uid-burst"]["web"]) == frozenset(range(6)) - exclusive
    # The exclusive container kept the cpuset it was created with: never pushed again.
    assert parse_cpuset(second["uid-two"]["app"]) == exclusive


@pytest.mark.parametrize("version", ["1.36", "1.37"])
def test_the_podresources_answers_of_a_pod_level_pod(
        version: str, need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    case = _case(version, ("admit", POOLED))
    with Reference(version) as ref:
        (_, admitted) = _run(ref, case)
        assert run_case(ref, case).agrees
    answer = admitted["state"]["answers"]["pods"]["uid-pooled"]
    block = parse_cpuset(admitted["state"]["pods"]["uid-pooled"])
    app = frozenset(answer["containers"]["app"])
    assert len(block) == 3 and len(app) == 1 and app < block
    assert answer["affinity"]["log"] == sorted(block - app)
    if version == "1.37":
        # Pod-level cpu_ids; a container on the pod's shared pool lists nothing.
        assert frozenset(answer["cpus"]) == block
        assert answer["containers"]["log"] == answer["containers"]["proxy"] == []
    else:
        # 1.36: no pod-level field; the pool listed as each shared container's own.
        assert answer["cpus"] == []
        assert frozenset(answer["containers"]["log"]) == block - app
    assert admitted["state"]["answers"]["allocatable"] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_none_policy(version: str, need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    case = _case(version, ("admit", TWO), ("admit", BURST), cpu_policy="none")
    with Reference(version) as ref:
        answers = _run(ref, case)
        assert run_case(ref, case).agrees
        assert not ref.request({"op": "reconcile", "statuses": {}})["ok"]
    state = answers[-1]["state"]
    assert state["default"] == "" and state["containers"] == {}
    assert state["answers"]["allocatable"] == []
    assert state["answers"]["pods"]["uid-two"]["containers"]["app"] == []
    assert state["answers"]["pods"]["uid-two"]["affinity"]["app"] == []


def test_the_model_side_of_the_none_policy() -> None:
    model = NodeModel(_topo(), replace(_case("1.37").config, cpu_policy="none"))
    assert model.admit(TWO) is not None
    assert model.allocatable == frozenset() and model.default_set == frozenset(range(6))
    state = {"default": "", "answers": {
        "allocatable": [], "all_cpus": list(range(6)),
        "pods": {"uid-two": {"cpus": [], "containers": {"app": []}, "affinity": {"app": []}}}}}
    assert compare_default(model, state) == []
    assert compare_answers(model, state, {"uid-two": TWO}) == []
    # A kubelet that pinned the container, or wrote a default set, would be told apart.
    state["answers"]["pods"]["uid-two"]["affinity"]["app"] = [0]
    assert compare_answers(model, state, {"uid-two": TWO})
    assert compare_default(model, {**state, "default": "0-5"})


def test_the_cpu_manager_parts_keep_the_rest_of_a_case() -> None:
    """The none policy and the reconcile steps come from a stream of their own: the pods and
    their order are the seed's as before."""
    for seed in range(40):
        base = random_case(seed, "1.37", topology_options=False)
        case = with_cpu_manager(base, "1.37", seed)
        assert [o for o in case.ops if o[0] != "reconcile"] == base.ops
        if case.config.cpu_policy == "none":
            assert case.config.options == frozenset() and case.ops == base.ops
    statuses = random_statuses(random.Random(1), {"uid-pooled": POOLED})
    assert set(statuses.get("uid-pooled", {})) <= {"app", "log", "proxy"}


def _one_cpu_none(version: str) -> Case:
    case = _case(version, ("admit", TWO), cpu_policy="none")
    topo = CPUTopology(cpus=(CPUInfo(0, 0, 0, 0),), memory=((0, 8 * GiB),))
    return replace(case, topo=topo, config=replace(case.config, reserved_cpu_m=1500))


def test_the_none_policy_reserves_nothing_in_the_model() -> None:
    """Found on 1.37.2, seed 5000290: the none policy's NewManager never reserves CPUs, so a
    1-CPU node with 1500m reserved starts; the model refused it ("cannot reserve 2 CPUs")."""
    case = _one_cpu_none("1.37")
    model = NodeModel(case.topo, case.config)
    assert model.reserved == frozenset() and model.default_set == frozenset({0})


@pytest.mark.parametrize("version", VERSIONS)
def test_the_none_policy_starts_whatever_is_reserved(
        version: str, need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    with Reference(version) as ref:
        assert ref.request(setup_request(_one_cpu_none(version)))["ok"]
        assert run_case(ref, _one_cpu_none(version)).agrees


@pytest.mark.parametrize("version", ["1.36", "1.37"])
def test_a_restart_that_moves_a_block_moves_its_running_containers(
        version: str, need_reference: Callable[[str], None]) -> None:
    """Found on 1.37.2, seed 5000060: the reference called the CPU manager's AddContainer for
    the containers of every pod admitted again after a restart, which recorded their new
    cpusets as pushed, so the reconcile loop left them on the old block. A restarted
    kubelet does not start running containers again (PreStartContainer, which calls
    AddContainer, does not run): the loop moves them."""
    need_reference(version)
    policy = "single-numa-node" if version == "1.37" else "best-effort"
    case = _case(version, ("admit", ALL_EXCLUSIVE), ("reconcile", None), ("restart", None),
                 ("reconcile", None), policy=policy)
    with Reference(version) as ref:
        answers = _run(ref, case)
        assert run_case(ref, case).agrees
    before, after = answers[2]["reconciled"]["cpus"], answers[4]["reconciled"]["cpus"]
    moved = answers[4]["state"]["containers"]["uid-allex"]
    assert parse_cpuset(before["uid-allex"]["a"]) != parse_cpuset(moved["a"])
    for name in ("a", "b"):
        assert parse_cpuset(after["uid-allex"][name]) == parse_cpuset(moved[name])
