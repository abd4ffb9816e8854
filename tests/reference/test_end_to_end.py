"""The exporter's sources against what the kubelet's own code writes and serves
(docs/design.md#reference): the checkpoint files its checkpoint code writes, read by
exporter/sources/checkpoint.py, and its PodResources v1 server, read by the exporter's client."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.reference import Reference, random_topology
from exporter.sources.checkpoint import parse_cpu_checkpoint, parse_memory_checkpoint
from exporter.sources.podresources import PodResourcesClient, decode_pods
from reconciler.allocator.report import pod_to_json
from reconciler.cpuset import format_cpuset, parse_cpuset
from reconciler.kube import ContainerSpec, PodSpec, Resources

GiB = 2**30
MiB = 2**20
# What each version writes (exporter/sources/checkpoint.py names the generations).
CPU_FORMAT = {"1.35": "v2", "1.36": "v3", "1.37": "v4"}


def _g(cpu_m: int, mem: int = 128 * MiB) -> Resources:
    return Resources(cpu_m, cpu_m, mem, mem)


def _setup(version: str, scope: str, gate: bool, state_dir: Path | None = None
           ) -> dict[str, Any]:
    rng = random.Random(f"e2e:{version}:{scope}:{gate}")
    topo = random_topology(rng)
    while len(topo.online) < 8:  # room for every pod of PODS
        topo = random_topology(rng)
    gates = {"PodLevelResources": True}
    if version != "1.35":
        gates["PodLevelResourceManagers"] = gate
    numa = topo.numa_nodes
    setup: dict[str, Any] = {
        "cpus": [{"id": c.id, "core": c.core, "socket": c.socket, "numa": c.numa_node,
                  "l3": -1} for c in topo.cpus],
        "memory": {str(n): b for n, b in topo.memory},
        "cpu_policy": "static", "topology_policy": "best-effort", "topology_scope": scope,
        "memory_policy": "Static", "reserved_cpu": "1",
        "reserved_memory": {str(numa[0]): 256 * MiB}, "feature_gates": gates,
    }
    if state_dir is not None:
        setup["state_dir"] = str(state_dir)
    return {"op": "setup", "setup": setup}


PODS = [
    PodSpec("e2e", "legacy", "uid-legacy", (ContainerSpec("app", _g(2000)),)),
    PodSpec("e2e", "pooled", "uid-pooled",
            (ContainerSpec("app", _g(1000)), ContainerSpec("side", Resources())),
            resources=_g(3000, 512 * MiB)),
    PodSpec("e2e", "burst", "uid-burst", (ContainerSpec("web", Resources(500, None, None, None)),)),
]


def _admit_all(ref: Reference) -> dict[str, Any]:
    """Admit PODS; the last state, with "admitted": the names of those admitted (a kubelet
    may refuse the pod-level one, see tests/reference/known.py)."""
    state: dict[str, Any] = {}
    admitted = []
    for pod in PODS:
        answer = ref.request({"op": "admit", "pod": pod_to_json(pod)})
        assert "state" in answer, answer
        state = answer["state"]
        if answer["ok"]:
            admitted.append(pod.name)
    state["admitted"] = admitted
    return state


CASES = [(v, scope, gate) for v in ("1.35", "1.36", "1.37") for scope in ("pod", "container")
         for gate in ((False,) if v == "1.35" else (False, True))]


@pytest.mark.parametrize(("version", "scope", "gate"), CASES)
def test_checkpoints_the_kubelet_writes_are_read_right(
        version: str, scope: str, gate: bool, need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    with Reference(version) as ref:
        assert ref.request(_setup(version, scope, gate))["ok"]
        state = _admit_all(ref)
    files = state["checkpoints"]
    cpu = parse_cpu_checkpoint(files["cpu_manager_state"])
    # 1.36 writes its new format (top-level podEntries) only when it holds pod entries: a
    # file without is the old one, which 1.35 reads.
    want = "v2" if version == "1.36" and not state["pods"] else CPU_FORMAT[version]
    assert cpu.format == want
    assert cpu.policy_name == "static"
    assert cpu.default_cpuset == parse_cpuset(state["default"])
    assert {u: {n: format_cpuset(s) for n, s in c.items()} for u, c in cpu.entries.items()} \
        == {u: {n: format_cpuset(parse_cpuset(s)) for n, s in c.items()}
            for u, c in state["containers"].items()}
    assert {u: format_cpuset(s) for u, s in cpu.pod_entries.items()} \
        == {u: format_cpuset(parse_cpuset(s)) for u, s in state["pods"].items()}
    mem = parse_memory_checkpoint(files["memory_manager_state"])
    assert mem.policy_name == "Static"
    got = {u: {n: [(list(b.numa_affinity), b.type, b.size) for b in blocks]
               for n, blocks in c.items()} for u, c in mem.entries.items()}
    want = {u: {n: [(b["numa"], b["type"], b["size"]) for b in blocks]
                for n, blocks in c.items()} for u, c in state["memory"].items()}
    assert got == want


@pytest.mark.parametrize(("writer", "reader"), [("1.36", "1.35"), ("1.35", "1.36"),
                                                 ("1.36", "1.37"), ("1.37", "1.36")])
def test_a_checkpoint_across_versions(writer: str, reader: str, tmp_path: Path,
                                      need_reference: Callable[[str], None]) -> None:
    """The other version's kubelet starting on these files: the 1.36 file that 1.35 refuses
    is the one the exporter calls downgrade-unsafe."""
    need_reference(writer)
    need_reference(reader)
    with Reference(writer) as ref:
        assert ref.request(_setup(writer, "pod", True, tmp_path))["ok"]
        state = _admit_all(ref)
    verdict = parse_cpu_checkpoint(state["checkpoints"]["cpu_manager_state"]).downgrade_unsafe
    with Reference(reader) as ref:
        started = ref.request(_setup(reader, "pod", True, tmp_path))
    if started["ok"]:
        assert parse_cpuset(started["state"]["default"]) == parse_cpuset(state["default"])
    if (writer, reader) == ("1.36", "1.35"):
        assert verdict == (not started["ok"]), started.get("error")


@pytest.mark.parametrize(("version", "scope", "gate"), CASES)
async def test_podresources_answers_of_the_real_server(
        version: str, scope: str, gate: bool, short_tmp: Path,
        need_reference: Callable[[str], None]) -> None:
    need_reference(version)
    socket = short_tmp / "kubelet.sock"
    with Reference(version) as ref:
        assert ref.request(_setup(version, scope, gate))["ok"]
        state = _admit_all(ref)
        assert ref.request({"op": "serve", "socket": str(socket)})["ok"]
        client = PodResourcesClient(str(socket))
        try:
            pods = {p.name: p for p in decode_pods(await client.list_raw())}
        finally:
            await client.close()
    assert set(pods) == set(state["admitted"])
    for pod in PODS:
        if pod.name not in pods:
            continue
        listed = pods[pod.name]
        held = state["containers"].get(pod.uid, {})
        pod_set = parse_cpuset(state["pods"].get(pod.uid, ""))
        # Only 1.37 answers the pod-level fields; 1.36 holds a pod-level block in its state
        # but its PodResources server has no way to say so (the reporting trap).
        assert frozenset(listed.cpu_ids) == (pod_set if version == "1.37" else frozenset())
        for c in listed.containers:
            cpus = frozenset(c.cpu_ids)
            if gate and c.name in held:
                # With the gate on, a container on its pod's shared pool lists no CPUs of
                # its own (1.37: the pod-level field carries the pool); an exclusive one
                # lists exactly what the CPU manager holds for it.
                assert cpus in (parse_cpuset(held[c.name]), frozenset())
            else:
                assert cpus == parse_cpuset(held.get(c.name, ""))
        if scope == "container" or not gate:
            assert listed.cpu_ids == ()
