"""What the reference asks the kubelet's managers for coverage's sake, and its comparison
with the model (bench/reference_coverage.py, docs/performance.md#coverage-of-the-kubelets-own-code):
the memory manager's GetMemoryNUMANodes for every container (the cpuset.mems it is created
with), and the allocatable the predicate admit handler sees after the device manager's
UpdatePluginResources. Each is read from a real admission, then altered to check that the
comparison notices."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from bench import reference_devices
from bench.reference import Reference, _step, compare, random_case, setup_request
from bench.reference_coverage import MIXES, chosen_mixes
from bench.reference_memory import compare_memory
from reconciler.allocator import NodeModel
from reconciler.kube import PodSpec

SEED = 20261204


def _first(version: str, want: Callable[[dict[str, Any]], bool], *, memory: bool,
           devices: bool) -> tuple[NodeModel, dict[str, Any], dict[str, PodSpec]]:
    """The model, the reference's state and the live pods after the first agreeing
    admission of the random cases from SEED whose state ``want`` accepts."""
    with Reference(version) as ref:
        for i in range(60):
            case = random_case(SEED * 1_000_003 + i, version, memory=memory,
                               devices=True if devices else None)
            if not ref.request(setup_request(case)).get("ok"):
                continue
            model = NodeModel(case.topo, case.config, case.devices)
            live: dict[str, PodSpec] = {}
            for op, pod in case.ops:
                if op != "admit" or _step(ref, model, live, op, pod):
                    break
                state = ref.request({"op": "state"})["state"]
                if want(state):
                    return model, state, live
    pytest.fail(f"no such admission in 60 cases (memory {memory}, devices {devices})")


def _mems(state: dict[str, Any]) -> dict[tuple[str, str], list[int]]:
    return {(uid, c): nodes for uid, a in state["answers"]["pods"].items()
            for c, nodes in (a.get("mems") or {}).items()}


@pytest.mark.parametrize("version", ["1.35", "1.36", "1.37"])
def test_memory_numa_nodes_of_every_container_are_compared(
        version: str, need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    model, state, live = _first(version, lambda s: bool(_mems(s)), memory=True,
                                devices=False)
    assert compare_memory(model, state, live) == []
    (uid, name), _ = next(iter(_mems(state).items()))
    altered = copy.deepcopy(state)
    altered["answers"]["pods"][uid]["mems"][name] = [63]
    assert any("GetMemoryNUMANodes" in line for line in compare_memory(model, altered, live))


@pytest.mark.parametrize("version", ["1.35", "1.36", "1.37"])
def test_allocatable_at_admission_is_compared(
        version: str, need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    model, state, live = _first(version, lambda s: bool(s.get("devices")), memory=False,
                                devices=True)
    assert compare(model, state, live) == []
    assert state["device_admit_allocatable"] == state["device_allocatable"]
    altered = copy.deepcopy(state)
    name = next(iter(altered["device_admit_allocatable"]))
    altered["device_admit_allocatable"][name] += 1
    assert any("allocatable at admission" in line
               for line in reference_devices.compare_devices(model, altered, live))


def test_the_joined_mix_and_the_single_mixes() -> None:
    assert chosen_mixes(memory=False, devices=False) == MIXES
    assert list(chosen_mixes(memory=True, devices=False)) == ["memory"]
    assert list(chosen_mixes(memory=False, devices=True)) == ["devices"]
    assert chosen_mixes(memory=True, devices=True) == {
        "memory+devices": (True, True, MIXES["memory"][2])}
    # Each mix from a seed of its own.
    assert len({offset for _, _, offset in MIXES.values()}) == len(MIXES)


@pytest.mark.parametrize("version", ["1.35", "1.36", "1.37"])
def test_allocated_resources_status_is_compared(
        version: str, need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    model, state, live = _first(version, lambda s: bool(s.get("device_health")),
                                memory=False, devices=True)
    assert compare(model, state, live) == []
    altered = copy.deepcopy(state)
    by_container = next(iter(altered["device_health"].values()))
    by_resource = next(iter(by_container.values()))
    name = next(iter(by_resource))
    by_resource[name] = [i.replace("=Healthy", "=Unhealthy") for i in by_resource[name]]
    assert any("allocated resources status" in line
               for line in reference_devices.compare_devices(model, altered, live))
