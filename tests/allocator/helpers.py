"""Small builders for allocator tests."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.kube import ContainerSpec, PodSpec, Resources

if TYPE_CHECKING:
    from exporter.sim.model_driven import ModelDrivenNode

GI = 2**30


def res(cpu: str | None, mem: str | None = "1Gi", *, guaranteed: bool = True) -> Resources:
    from reconciler.kube import cpu_millis, memory_bytes
    c = cpu_millis(cpu) if cpu is not None else None
    m = memory_bytes(mem) if mem is not None else None
    if guaranteed:
        return Resources(c, c, m, m)
    return Resources(c, None, m, None)


def ctr(name: str, cpu: str | None = None, mem: str | None = "1Gi", *, sidecar: bool = False,
        init: bool = False, guaranteed: bool = True) -> ContainerSpec:
    r = res(cpu, mem, guaranteed=guaranteed) if cpu is not None else Resources()
    return ContainerSpec(name, r, sidecar=sidecar, init=init)


def pod(name: str, *containers: ContainerSpec, budget: str | None = None,
        budget_mem: str = "8Gi", init: tuple[ContainerSpec, ...] = (),
        namespace: str = "default") -> PodSpec:
    resources = res(budget, budget_mem) if budget is not None else None
    return PodSpec(namespace, name, uid=f"uid-{name}", containers=tuple(containers),
                   init_containers=init, resources=resources)


GPU_SPLIT = Path(__file__).resolve().parents[1] / "data" / "devices" / "gpu-split.yaml"


def gpu_split_node(policy: str) -> ModelDrivenNode:
    """Issue 26's device node, model-driven: GPUs on two NUMA nodes (one each) of a
    2-socket, 8-CPU node whose NUMA node 1 has one CPU left to give (4-6 reserved), container
    scope; tests/data/devices/gpu-split.yaml placed in order: ml/gpu-shared takes the NUMA-0
    GPU, then ml/gpu-worker asks 2 exclusive CPUs and 1 GPU (docs/plan.md#devices)."""
    from exporter.sim.model_driven import ModelDrivenNode, desired_pods
    from reconciler.allocator.devices import NodeDevices
    from reconciler.allocator.model import ModelConfig
    from reconciler.allocator.topology import from_spec

    config = ModelConfig(topology_policy=policy, scope="container",
                         reserved_cpus=frozenset({4, 5, 6}))
    node = ModelDrivenNode(from_spec("2x4x1"), config,
                           devices=NodeDevices.parse(["nvidia.com/gpu=0:1,1:1"]))
    node.sync(desired_pods(str(GPU_SPLIT)))
    return node
