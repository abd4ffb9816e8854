"""The memory side of the reference differential (docs/design.md#reference): cases under the
Static memory manager, what their setup tells the kubelet about memory, and the comparison
of the memory manager's state with the model's.

A memory case has reserved memory on every NUMA node, on some machines hugepages of 2 MiB
and 1 GiB per NUMA node, and pods asking for real amounts of memory and hugepages, at
container and at pod level. It keeps the CPU case's topology policy, scope and operations
(admissions, removals, restarts)."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from reconciler.allocator.memory_state import MachineState
from reconciler.kube import PodSpec, Resources

if TYPE_CHECKING:
    from bench.reference import Case
    from reconciler.allocator import NodeModel

GiB = 2**30
MiB = 2**20
HUGE_2M, HUGE_1G = "hugepages-2Mi", "hugepages-1Gi"
PAGE_KIB = {HUGE_2M: 2048, HUGE_1G: 1024 * 1024}


def _hugepages(rng: random.Random, room: int) -> dict[str, int]:
    """Hugepages of one NUMA node, in bytes per page size, within ``room``."""
    out = {HUGE_2M: rng.choice((0, 128, 512, 1024)) * 2 * MiB,
           HUGE_1G: rng.choice((0, 1, 1, 2, 3)) * GiB}
    while sum(out.values()) > room // 2 and any(out.values()):
        big = max(out, key=lambda t: out[t])
        out[big] -= 2 * MiB if big == HUGE_2M else GiB
    return out


# The share of the default mix's cases under the Static memory manager: the rest keep the
# CPU-only cases every seed had before memory joined the mix.
SHARE = 0.25


def under_memory(version: str, seed: int) -> bool:
    """Whether the default mix runs this seed's case under the Static memory manager (a
    stream of its own, so the draw moves no other choice of the case)."""
    return random.Random(f"{version}:{seed}:memory-share").random() < SHARE


def with_memory(case: Case, version: str, seed: int) -> Case:
    """The case under the Static memory manager, from a random stream of its own (so the
    CPU-only cases of every seed stay as they were)."""
    rng = random.Random(f"{version}:{seed}:memory")
    reserved = tuple((n, rng.choice((256, 512, 1024)) * MiB) for n, _ in case.topo.memory)
    huge: list[tuple[int, str, int]] = []
    if rng.random() < 0.5:
        # cAdvisor lists every page size the kernel offers on every node, none or not.
        for (n, b), (_, r) in zip(case.topo.memory, reserved, strict=True):
            pages = _hugepages(rng, b - r)
            huge += [(n, t, pages.get(t, 0)) for t in (HUGE_2M, HUGE_1G)]
    on_node = {n: sum(s for m, _, s in huge if m == n) for n, _ in case.topo.memory}
    left = tuple((n, b - r - on_node[n])
                 for (n, b), (_, r) in zip(case.topo.memory, reserved, strict=True))
    kinds = sorted({t for _, t, size in huge if size})
    sizes = (64 * MiB, 256 * MiB, 1 * GiB, 2 * GiB, 3 * GiB, 6 * GiB)
    page_sizes = {HUGE_2M: (64 * MiB, 256 * MiB, 512 * MiB, 2 * GiB), HUGE_1G: (GiB, 2 * GiB)}

    def sized(r: Resources) -> Resources:
        if r.memory_limit is None and r.memory_request is None:
            return r
        size = rng.choice(sizes)
        pages: tuple[tuple[str, int], ...] = ()
        if kinds and r.memory_limit is not None and rng.random() < 0.4:
            t = rng.choice(kinds)
            pages = ((t, rng.choice(page_sizes[t])),)
        return Resources(r.cpu_request_m, r.cpu_limit_m, size,
                         size if r.memory_limit is not None else None, hugepages=pages)

    def pod(p: PodSpec) -> PodSpec:
        apps = tuple(replace(c, resources=sized(c.resources)) for c in p.containers)
        inits = tuple(replace(c, resources=sized(c.resources)) for c in p.init_containers)
        res = p.resources
        if res is not None and res.memory_limit is not None:
            running = [c for c in (*apps, *inits) if not c.init]
            whole = sum(c.resources.memory_limit or 0 for c in running)
            size = max(whole, 64 * MiB) + rng.choice((0, 0, 256 * MiB, 1 * GiB))
            pages: dict[str, int] = {}
            for c in running:
                for t, b in c.resources.hugepages:
                    pages[t] = pages.get(t, 0) + b
            for t in pages:
                pages[t] += rng.choice((0, 0, PAGE_KIB[t] * 1024))
            res = Resources(res.cpu_request_m, res.cpu_limit_m, size,
                            size if res.memory_limit is not None else None,
                            hugepages=tuple(sorted(pages.items())))
        return replace(p, containers=apps, init_containers=inits, resources=res)

    done: dict[str, PodSpec] = {}
    ops: list[tuple[str, PodSpec | None]] = []
    for op, p in case.ops:
        if p is not None:
            p = done.setdefault(p.uid, pod(p))
        ops.append((op, p))
    topo = replace(case.topo, memory=left, hugepages=tuple(huge), by_id={}, core_cpus={},
                   numa_cpus={}, socket_cpus={}, uncore_cpus={}, uncore_of={})
    return replace(case, topo=topo,
                   config=replace(case.config, memory_policy="Static"), ops=ops,
                   reserved_memory=reserved)


def memory_setup(case: Case) -> dict[str, Any]:
    """The setup's memory: each NUMA node's whole size (what is left, reserved memory and
    hugepages), the reservation, and the hugepages as pages per page size in KiB."""
    reserved = dict(case.reserved_memory)
    pages: dict[str, dict[str, int]] = {}
    on_node: dict[int, int] = {}
    for n, t, size in case.topo.hugepages:
        kib = PAGE_KIB[t]
        pages.setdefault(str(n), {})[str(kib)] = size // (kib * 1024)
        on_node[n] = on_node.get(n, 0) + size
    return {"memory": {str(n): b + reserved.get(n, 0) + on_node.get(n, 0)
                       for n, b in case.topo.memory},
            "reserved_memory": {str(n): b for n, b in case.reserved_memory},
            "hugepages": pages}


def _blocks(raw: Sequence[Any] | None) -> list[tuple[str, int, tuple[int, ...]]]:
    out = []
    for b in raw or ():
        if isinstance(b, Mapping):
            out.append((b["type"], b["size"], tuple(sorted(b["numa"] or ()))))
        else:
            out.append((b.memory_type, b.size, tuple(sorted(b.numa_nodes))))
    return sorted(out)


def kubelet_machine(state: Mapping[str, Any]) -> MachineState | None:
    """The machine state of the memory manager's checkpoint in a reference answer."""
    text = (state.get("checkpoints") or {}).get("memory_manager_state")
    if not text:
        return None
    obj = json.loads(text)
    if "machineState" not in obj and "data" in obj:
        obj = json.loads(obj["data"])
    return MachineState.from_checkpoint(obj.get("machineState") or {})


def _compare_mems(model: NodeModel, state: Mapping[str, Any], live: Mapping[str, PodSpec]
                  ) -> list[str]:
    """The memory manager's GetMemoryNUMANodes for every container, init ones too (the
    cpuset.mems the container is created with): the NUMA nodes of its own blocks, of every
    type, none when it has no blocks."""
    out: list[str] = []
    answers = (state.get("answers") or {}).get("pods") or {}
    placed = {p.uid: p for p in model.pods.values()}
    for uid, pod in live.items():
        said = (answers.get(uid) or {}).get("mems")
        if said is None:
            continue  # a reference from before the field
        p = placed.get(uid)
        entries = dict(p.mem_entries) if p else {}
        for c in (*pod.init_containers, *pod.containers):
            want = sorted(said.get(c.name) or ())
            got = sorted({n for b in entries.get(c.name, ()) for n in b.numa_nodes})
            if want != got:
                out.append(f"{pod.name}/{c.name} memory NUMA nodes (GetMemoryNUMANodes): "
                           f"kubelet {want or '-'}, model {got or '-'}")
    return out


def compare_memory(model: NodeModel, state: Mapping[str, Any], live: Mapping[str, PodSpec]
                   ) -> list[str]:
    """Differences between the model's memory and the memory manager's state: each
    long-running container's blocks (type, size, NUMA nodes), each pod-level set, every
    container's NUMA nodes as GetMemoryNUMANodes gives them, and the machine state (blocks
    and group per node, free and reserved per group and type)."""
    out: list[str] = []
    placed = {p.uid: p for p in model.pods.values()}
    for uid, pod in live.items():
        p = placed.get(uid)
        entries = dict(p.mem_entries) if p else {}
        ref = state["memory"].get(uid) or {}
        for c in pod.long_running:
            want, got = _blocks(ref.get(c.name)), _blocks(entries.get(c.name))
            if want != got:
                out.append(f"{pod.name}/{c.name} memory: kubelet {want}, model {got}")
        want_pod = _blocks(state["pod_memory"].get(uid))
        got_pod = _blocks(p.block_memory if p else ())
        if want_pod != got_pod:
            out.append(f"{pod.name} pod-level memory: kubelet {want_pod}, model {got_pod}")
    out += _compare_mems(model, state, live)
    machine = kubelet_machine(state)
    if machine is not None and not (machine.matches(model.mem) and model.mem.matches(machine)):
        out.append(f"memory machine state: kubelet {machine.summary()}, model "
                   f"{model.mem.summary()}")
    return out
