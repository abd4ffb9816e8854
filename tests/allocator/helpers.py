"""Small builders for allocator tests."""

from __future__ import annotations

from reconciler.kube import ContainerSpec, PodSpec, Resources

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
