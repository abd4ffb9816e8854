"""What a kubelet of a given version reports for the model's placements (pure).

* ``1.37``: pod-level ``cpu_ids``/``memory`` hold the pod's block; exclusive containers their
  slices; pod-shared containers report nothing.
* ``1.36``: no pod-level fields; a pod-shared container reports the pod shared pool as its
  own ``cpu_ids`` (and the pod's shared memory), the 1.36 alpha trap.
* ``1.35``: no pod-level allocation at all (the model runs without pod-level managers):
  legacy per-container reports.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from reconciler.allocator.devices import allocatable
from reconciler.allocator.model import NodeModel, PodPlacement, Rejection
from reconciler.kube import ContainerSpec, PodSpec, Resources
from reconciler.snapshot import Allocatable, ContainerAlloc, MemoryBlock, PodAlloc

STYLES = ("1.37", "1.36", "1.35")


def _shared_memory(p: PodPlacement) -> tuple[MemoryBlock, ...]:
    if not p.block_memory:
        return ()
    total = sum(b.size for b in p.block_memory)
    used = sum(b.size for c in p.containers for b in c.memory)
    left = total - used
    if left <= 0:
        return ()
    return (MemoryBlock("memory", left, p.block_memory[0].numa_nodes),)


def report_pod(p: PodPlacement, style: str) -> PodAlloc:
    if style not in STYLES:
        raise ValueError(f"unknown reporting style {style!r}")
    containers = []
    shared_mem = _shared_memory(p) if style == "1.36" else ()
    for c in p.containers:
        if c.exclusive:
            containers.append(ContainerAlloc(c.name, tuple(sorted(c.exclusive)), c.memory,
                                             c.devices))
        elif style == "1.36" and p.block:
            containers.append(ContainerAlloc(c.name, tuple(sorted(p.shared_pool)), shared_mem,
                                             c.devices))
        else:
            containers.append(ContainerAlloc(c.name, (), c.memory, c.devices))
    if style == "1.37" and p.block:
        return PodAlloc(p.namespace, p.name, tuple(containers), tuple(sorted(p.block)),
                        p.block_memory)
    return PodAlloc(p.namespace, p.name, tuple(containers))


def report_pods(model: NodeModel, style: str) -> tuple[PodAlloc, ...]:
    """``List``: active pods in admission order."""
    return tuple(report_pod(p, style) for p in model.pods.values())


def report_allocatable(model: NodeModel) -> Allocatable:
    memory = tuple(MemoryBlock("memory", size, (n,)) for n, size in model.topo.memory) \
        if model.memory_enabled else ()
    return Allocatable(tuple(sorted(model.allocatable)), memory, allocatable(model.devices))


def _quantities(r: Resources) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for section, cpu, mem in (("requests", r.cpu_request_m, r.memory_request),
                              ("limits", r.cpu_limit_m, r.memory_limit)):
        block: dict[str, str] = {}
        if cpu is not None:
            block["cpu"] = str(cpu // 1000) if cpu % 1000 == 0 else f"{cpu}m"
        if mem is not None:
            block["memory"] = str(mem)
        for name, count in r.extended:
            block[name] = str(count)
        for name, size in r.hugepages:
            block[name] = str(size)
        if block:
            out[section] = block
    return out


def _container_json(c: ContainerSpec) -> dict[str, Any]:
    obj: dict[str, Any] = {"name": c.name, "image": "registry.example/sim:1"}
    if c.sidecar:
        obj["restartPolicy"] = "Always"
    resources = _quantities(c.resources)
    obj["resources"] = resources
    return obj


def pod_to_json(pod: PodSpec, phase: str = "Running", reason: str | None = None
                ) -> dict[str, Any]:
    """A ``v1.Pod`` as the kubelet's ``/pods`` would show it."""
    spec: dict[str, Any] = {"containers": [_container_json(c) for c in pod.containers]}
    if pod.init_containers:
        spec["initContainers"] = [_container_json(c) for c in pod.init_containers]
    if pod.resources is not None and pod.resources.is_set:
        spec["resources"] = _quantities(pod.resources)
    status: dict[str, Any] = {"phase": phase, "qosClass": pod.qos}
    if reason:
        status["reason"] = "UnexpectedAdmissionError"
        status["message"] = f"Pod was rejected: {reason}"
    return {"metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "spec": spec, "status": status}


def pod_list_json(model: NodeModel, rejected: Iterable[tuple[PodSpec, Rejection]] = ()
                  ) -> dict[str, Any]:
    items = [pod_to_json(p.spec) for p in model.pods.values()]
    items += [pod_to_json(spec, "Failed", r.reason) for spec, r in rejected]
    return {"kind": "PodList", "apiVersion": "v1", "items": items}
