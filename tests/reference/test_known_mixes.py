"""Disagreements between the kubelet and the model on nodes with device-plugin devices (and
the memory manager beside them) that the seed 8800 and 7100 mixes found, each shrunk to a
small case and run through the kubelet versions it shows on. The kubelet's side is asserted
as found, and the model must do the same (the device cases run with test_known.py's
REGRESSIONS; docs/design.md#devices-in-the-model); without Go the model's side is asserted
alone."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import pytest

from bench.reference import Case, Reference, run_case
from reconciler.allocator import CPUTopology, ModelConfig, NodeModel
from reconciler.allocator.devices import Device, NodeDevices
from reconciler.allocator.placement import PodPlacement, Rejection
from reconciler.allocator.restart import restart
from reconciler.cpuset import parse_cpuset
from reconciler.kube import ContainerSpec, PodSpec, Resources
from reconciler.snapshot import CPUInfo

GiB = 2**30
MiB = 2**20
NIC = "example.com/nic"


def _g(cpu_m: int, extended: tuple[tuple[str, int], ...] = ()) -> Resources:
    return Resources(cpu_m, cpu_m, 64 * MiB, 64 * MiB, extended=extended)


# ---- the devices of a refused pod stay in the device checkpoint --------------------------
# Two NUMA nodes of four CPUs (CPU 0 reserved), two NICs on each; the plugin asks for
# PreStartContainer, so the pod-level pod's container, which gets its devices when it
# starts, gets none (its start fails) and no later write of the checkpoint happens.
# ``TOO_BIG`` asks more CPUs than there are: under best-effort the pod scope admits it, the
# device manager (the first hint provider) allocates its two NICs on node 0 and writes its
# checkpoint, then the CPU manager's Allocate refuses. The sweep drops the NICs from the
# device manager's memory, not from the file; at the restart they are read back and stay
# taken while the pods are admitted again, so ``POD_LEVEL``'s device hint is node 1 only,
# and AllocatePod carves the new block there (found as seeds 8800026825 on 1.36.3,
# 8800026499 and 7100021331 on 1.37.2 of the --devices mix; 3209010332, 1.37.2, the open
# "device-pod-block-at-restart" kind it was).
TWO_NODES = CPUTopology(cpus=tuple(CPUInfo(i, i, 0, i // 4) for i in range(8)),
                        memory=((0, 8 * GiB), (1, 8 * GiB)),
                        distances=((0, (10, 20)), (1, (20, 10))))
NICS = NodeDevices.of({NIC: [Device("nic-0", (0,)), Device("nic-1", (0,)),
                             Device("nic-2", (1,)), Device("nic-3", (1,))]}, {}, {NIC})
TOO_BIG = PodSpec("ref", "too-big", "uid-too-big", (ContainerSpec("app", _g(8000, ((NIC, 2),))),))
POD_LEVEL = PodSpec("ref", "pod-level", "uid-pod-level",
                    (ContainerSpec("app", Resources(extended=((NIC, 2),))),), resources=_g(2000))


def _refused_pods_devices(version: str) -> Case:
    config = ModelConfig(topology_policy="best-effort", scope="pod", memory_policy="None",
                         reserved_cpu_m=1000, pod_level=True, kubelet_version=version)
    gates = {"CPUManagerPolicyAlphaOptions": True, "PodLevelResources": True,
             "PodLevelResourceManagers": True}
    return Case(0, TWO_NODES, config, gates,
                [("admit", TOO_BIG), ("admit", POD_LEVEL), ("restart", None)], devices=NICS)


def _block_moves_off_the_stale_nics(answers: list[dict[str, Any]], case: Case) -> None:
    refused, admitted, again = answers
    assert not refused["ok"] and "not enough cpus" in refused["error"]
    assert parse_cpuset(admitted["state"]["pods"][POD_LEVEL.uid]) == {1, 2}
    assert [r["admitted"] for r in again["readmitted"]] == [True]
    # Node 0 has CPU 3 free and its NICs are free in memory, yet the block is on node 1.
    assert parse_cpuset(again["state"]["pods"][POD_LEVEL.uid]) == {4, 5}
    assert not again["state"].get("devices")


# ---- 1.36 checks the hint of a container that asks no memory --------------------------
# A pod with pod-level resources under the container scope: 1.36's memory manager goes on
# with a container that asks nothing (an empty entry), and checks that its hint breaks no
# group. The NICs' hint is both NUMA nodes; ``NARROW``'s memory then goes on node 0 alone.
# At the restart the ordinary init container, dropped from the state when the app was
# added, is allocated again on that two-node hint, which node 0's single-node block now
# breaks: 1.36 refuses the pod; 1.37 skips a container asking nothing (found as seeds
# 9100027455 and 9200027701 on 1.36.3 of the --memory --devices mix).
WIDE = PodSpec("ref", "wide", "uid-wide", (ContainerSpec("app", Resources(extended=((NIC, 3),))),),
               (ContainerSpec("init", init=True),), resources=_g(2000, ()))
NARROW = PodSpec("ref", "narrow", "uid-narrow", (ContainerSpec("app", _g(1000)),))


def _empty_request(version: str) -> Case:
    topo = CPUTopology(cpus=tuple(CPUInfo(i, i, 0, i // 2) for i in range(4)),
                       memory=((0, 3 * GiB), (1, 3 * GiB)),
                       distances=((0, (10, 20)), (1, (20, 10))))
    nics = NodeDevices.of({NIC: [Device("nic-0", (0,)), Device("nic-1", (0,)),
                                 Device("nic-2", (1,))]}, {}, {NIC})
    config = ModelConfig(topology_policy="restricted", scope="container",
                         memory_policy="Static", reserved_cpu_m=1000, pod_level=True,
                         kubelet_version=version)
    gates = {"CPUManagerPolicyAlphaOptions": True, "PodLevelResources": True,
             "PodLevelResourceManagers": True}
    return Case(0, topo, config, gates, [("admit", WIDE), ("admit", NARROW), ("restart", None)],
                reserved_memory=((0, GiB), (1, GiB)), devices=nics)


def _readmitted(*admitted: bool) -> Callable[[list[dict[str, Any]], Case], None]:
    def check(answers: list[dict[str, Any]], case: Case) -> None:
        *_, again = answers
        assert [r["admitted"] for r in again["readmitted"]] == list(admitted)
        for r in again["readmitted"]:
            if not r["admitted"]:
                assert "preferred hint violates NUMA node allocation" in r["message"]
    return check


# ---- a dropped init container is allocated again under any topology policy ------------
# The none CPU and topology policies, the Static memory manager: ``DROPPED``'s pod-level
# resources leave its app asking no memory, while its init container, Guaranteed on its own,
# asks 2 GiB of node 0's 3, given back once it ends. ``SPREAD`` then takes 5 GiB across
# both nodes. At the restart the init container, in no state, meets ``Allocate`` again, and
# no node set has 2 GiB left: the kubelet refuses the pod, where the model had re-admitted a
# pod holding no memory blocks unchecked (found as seed 9900030649 on 1.37.2 of the
# --memory --devices mix).
DROPPED = PodSpec("ref", "dropped", "uid-dropped", (ContainerSpec("app"),),
                  (ContainerSpec("init", Resources(1000, 1000, 2 * GiB, 2 * GiB), init=True),),
                  resources=_g(1000))
SPREAD = PodSpec("ref", "spread", "uid-spread",
                 (ContainerSpec("app", Resources(1000, 1000, 5 * GiB, 5 * GiB)),))


def _dropped_init(version: str) -> Case:
    topo = CPUTopology(cpus=tuple(CPUInfo(i, i, 0, i // 2) for i in range(4)),
                       memory=((0, 3 * GiB), (1, 3 * GiB)),
                       distances=((0, (10, 20)), (1, (20, 10))))
    config = ModelConfig(cpu_policy="none", topology_policy="none", scope="pod",
                         memory_policy="Static", reserved_cpu_m=1000, pod_level=True,
                         kubelet_version=version)
    gates = {"CPUManagerPolicyAlphaOptions": True, "PodLevelResources": True,
             "PodLevelResourceManagers": True}
    return Case(0, topo, config, gates,
                [("admit", DROPPED), ("admit", SPREAD), ("restart", None)],
                reserved_memory=((0, GiB), (1, GiB)))


def _dropped_init_refused(answers: list[dict[str, Any]], case: Case) -> None:
    dropped, spread, again = answers
    assert dropped["ok"] and spread["ok"]
    assert not dropped["state"]["memory"]  # the init container's blocks went back
    assert [r["admitted"] for r in again["readmitted"]] == [False, True]
    assert "failed to get the default NUMA affinity" in again["readmitted"][0]["message"]


# ---- 1.36 allocates an empty request on the merge of no preference ---------------------
# The best-effort container scope, a pod with pod-level resources whose ordinary init
# container asks nothing and whose app asks 5 GiB of its own, across both nodes (each has
# 3 GiB). At the restart 1.36's ``Allocate`` goes on for the dropped init container (an
# empty entry) on the topology manager's merge of providers with no preference: every
# node, preferred, which breaks no group; the model had taken that merge for no affinity
# and looked for a default hint for nothing, which no node gives (found as seed
# 20261265784327 on 1.36.3 of the default mix).
EMPTY_INIT = PodSpec("ref", "empty-init", "uid-empty-init",
                     (ContainerSpec("app", Resources(1000, 1000, 5 * GiB, 5 * GiB)),),
                     (ContainerSpec("init", init=True),),
                     resources=Resources(1000, 1000, 6 * GiB, 6 * GiB))


def _empty_init(version: str) -> Case:
    case = _dropped_init(version)
    config = replace(case.config, topology_policy="best-effort", scope="container")
    return replace(case, config=config, ops=[("admit", EMPTY_INIT), ("restart", None)])


# Run through the kubelet, both sides, by test_known.py's REGRESSIONS.
CASES = [("refused-pods-devices-at-restart", v, _refused_pods_devices(v),
          _block_moves_off_the_stale_nics) for v in ("1.36", "1.37")] + [
    ("empty-request-hint-at-restart", "1.36", _empty_request("1.36"), _readmitted(False, True)),
    ("empty-request-hint-at-restart", "1.37", _empty_request("1.37"), _readmitted(True, True)),
    ("dropped-init-allocated-again", "1.37", _dropped_init("1.37"), _dropped_init_refused),
    ("empty-init-on-no-preference-at-restart", "1.36", _empty_init("1.36"), _readmitted(True)),
]


def test_the_model_keeps_a_refused_pods_devices_in_its_checkpoint() -> None:
    case = _refused_pods_devices("1.37")
    model = NodeModel(case.topo, case.config, case.devices)
    refused = model.admit(TOO_BIG)
    assert isinstance(refused, Rejection)
    assert refused.devices_checkpointed == {NIC: {"nic-0", "nic-1"}}
    assert model.dev_free[NIC] == {"nic-0", "nic-1", "nic-2", "nic-3"}  # swept
    assert isinstance(model.admit(POD_LEVEL), PodPlacement)
    result = restart(model)
    assert result.error is None and [r.admitted for r in result.readmitted] == [True]
    assert model.pods[POD_LEVEL.namespace, POD_LEVEL.name].block == {4, 5}


# ---- the memory manager's start check, which Go's map order decides ---------------------
# Three NUMA nodes, node 0 with 256 MiB of 2 MiB pages, nodes 1 and 2 with 1 GiB each. The
# sidecar's 1.5 GiB of pages fit no node alone: on the pod scope's hint (node 1) the memory
# manager extends its blocks to nodes 1 and 2, while the app's block stays on node 1, which
# the checkpoint leaves in the group of the last block allocated there (the app's, {1}). At
# the restart ``validateState`` walks the pod's containers as a Go map: when the sidecar
# comes last it puts node 1 in the group {1,2} and the check fails, else it passes (found
# as seed 8800026725 on 1.36.3 of the --memory --devices mix, where the model said it always
# fails). Both outcomes are the kubelet's; the model allows both and starts.
HUGE_2M = "hugepages-2Mi"
THREE_NODES = CPUTopology(
    cpus=tuple(CPUInfo(i, i, 0, i // 2) for i in range(6)),
    memory=tuple((n, 4 * GiB) for n in range(3)),
    distances=tuple((n, tuple(10 if m == n else 20 for m in range(3))) for n in range(3)),
    hugepages=tuple((n, HUGE_2M, 256 * MiB if n == 0 else GiB) for n in range(3)))
MIXED_GROUPS = PodSpec(
    "ref", "mixed", "uid-mixed", (ContainerSpec("app", _g(1000)),),
    (ContainerSpec("side", Resources(1000, 1000, 64 * MiB, 64 * MiB,
                                     hugepages=((HUGE_2M, 1536 * MiB),)), sidecar=True),))
# Enough restarts that a kubelet showing one outcome only would be a 1 in 2**23 chance.
TRIES = 24


def _mixed_groups(version: str) -> Case:
    config = ModelConfig(topology_policy="best-effort", scope="pod", memory_policy="Static",
                         reserved_cpu_m=1000, pod_level=True, kubelet_version=version)
    gates = {"CPUManagerPolicyAlphaOptions": True, "PodLevelResources": True,
             "PodLevelResourceManagers": True}
    return Case(0, THREE_NODES, config, gates, [("admit", MIXED_GROUPS), ("restart", None)],
                reserved_memory=tuple((n, 256 * MiB) for n in range(3)))


def test_the_model_allows_both_outcomes_of_the_start_check() -> None:
    case = _mixed_groups("1.37")
    model = NodeModel(case.topo, case.config)
    placed = model.admit(MIXED_GROUPS)
    assert isinstance(placed, PodPlacement)
    groups = {name: {b.numa_nodes for b in blocks} for name, blocks in placed.mem_entries}
    assert groups == {"side": {(1, 2)}, "app": {(1,)}}
    result = restart(model)
    assert result.error is None and result.may_fail is not None
    assert "expected machine state is different" in result.may_fail


@pytest.mark.parametrize("version", ["1.36", "1.37"])
def test_the_kubelet_starts_or_not_and_the_model_allows_each(
        version: str, need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    case = _mixed_groups(version)
    starts = set()
    with Reference(version) as ref:
        ask = ref.request

        def request(req: Mapping[str, Any]) -> dict[str, Any]:
            answer = ask(req)
            if req["op"] == "restart":
                starts.add(bool(answer["ok"]))
            return answer

        ref.request = request  # type: ignore[method-assign]
        for _ in range(TRIES):
            outcome = run_case(ref, case)
            assert outcome.agrees, outcome.disagreements
    assert starts == {True, False}


# ---- a refused pod's device picks, read back from the device checkpoint ------------------
# One NUMA node, four FPGAs, fpga-1 without topology; single-numa-node and the container
# scope, whose merged hint on this machine is no NUMA node at all, so each container's
# devices are a Go set's pick among every free one. The sidecar keeps one, the init
# container takes two that the app containers reuse: app0 one of them, app1 the other and
# one free. A device without topology counts in no mask (generateDeviceTopologyHints), so
# app1 has no hint, and is refused, whenever fpga-1 is among its two: the pod is admitted
# or refused as the earlier picks went. The kubelet's state drops a refused pod's devices,
# so the runner read no picks for it and the model took its own (found as seed 8800026880
# of the default mix, 1.37.2); they are read back from the device checkpoint now, which
# each container's allocation writes (bench/reference_devices.py ``tell_picks``).
FPGA = "example.com/fpga"
ONE_NODE = CPUTopology(cpus=tuple(CPUInfo(i, i, 0, 0) for i in range(4)),
                       memory=((0, 8 * GiB),), distances=((0, (10,)),))
FPGAS = NodeDevices.of({FPGA: [Device("fpga-0", (0,)), Device("fpga-1"),
                               Device("fpga-2", (0,)), Device("fpga-3", (0,))]})


def _fpgas(n: int) -> Resources:
    return Resources(extended=((FPGA, n),))


PICKS = PodSpec("ref", "picks", "uid-picks",
                (ContainerSpec("app0", _fpgas(1)), ContainerSpec("app1", _fpgas(2))),
                (ContainerSpec("side", _fpgas(1), sidecar=True),
                 ContainerSpec("init", _fpgas(2), init=True)))


@pytest.mark.parametrize("version", ["1.35", "1.36", "1.37"])
def test_a_refused_pods_picks_are_the_kubelets(
        version: str, need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    config = ModelConfig(topology_policy="single-numa-node", scope="container",
                         memory_policy="None", reserved_cpu_m=1000, kubelet_version=version)
    gates = {"CPUManagerPolicyAlphaOptions": True, "PodLevelResources": True}
    if version != "1.35":
        gates["PodLevelResourceManagers"] = False
    case = Case(0, ONE_NODE, config, gates, [("admit", PICKS)], devices=FPGAS)
    admitted = set()
    with Reference(version) as ref:
        ask = ref.request

        def request(req: Mapping[str, Any]) -> dict[str, Any]:
            answer = ask(req)
            if req["op"] == "admit":
                admitted.add(bool(answer["ok"]))
            return answer

        ref.request = request  # type: ignore[method-assign]
        for _ in range(TRIES):
            outcome = run_case(ref, case)
            assert outcome.agrees, outcome.disagreements
    assert admitted == {True, False}


def test_the_picks_of_a_refused_pod_are_read_from_the_device_checkpoint() -> None:
    """Without Go: the checkpoint as the device manager writes it (one entry a container
    and resource, device IDs by NUMA node, -1 for none); other pods' entries are not
    this pod's, and a state without the file tells nothing."""
    from bench.reference_devices import tell_picks
    entries = [{"PodUID": "uid-picks", "ContainerName": "side", "ResourceName": FPGA,
                "DeviceIDs": {"-1": ["fpga-1"]}},
               {"PodUID": "uid-picks", "ContainerName": "init", "ResourceName": FPGA,
                "DeviceIDs": {"0": ["fpga-0", "fpga-3"]}},
               {"PodUID": "uid-other", "ContainerName": "app", "ResourceName": FPGA,
                "DeviceIDs": {"0": ["fpga-2"]}}]
    text = json.dumps({"Data": {"PodDeviceEntries": entries, "RegisteredDevices": {}},
                       "Checksum": 0})
    model = NodeModel(ONE_NODE, ModelConfig(memory_policy="None", reserved_cpu_m=1000), FPGAS)
    tell_picks(model, {"devices": {}, "checkpoints": {}}, PICKS)
    assert PICKS.uid not in model.device_picks
    tell_picks(model, {"checkpoints": {"kubelet_internal_checkpoint": text}}, PICKS)
    assert model.device_picks[PICKS.uid] == {"side": {FPGA: {"fpga-1"}},
                                             "init": {FPGA: {"fpga-0", "fpga-3"}}}
