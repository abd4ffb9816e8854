"""A kubelet restart on the model's state (docs/design.md#allocator): the static policy's
``Start`` validates the state it restores, then every active pod is admitted again, in the
order it was first admitted, through the topology manager, and a pod refused then is killed.

The second admission asks the CPU manager for hints from what each container already holds
(``getTopologyHintsForAdd``, ``getPodTopologyHintsForAdd``): a container holding another
number of CPUs than it asks for gets none, and CPUs that are no preferred mask any more fail
``restricted`` and ``single-numa-node``. Then each container's ``Allocate`` finds it in the
state and keeps its CPUs (1.35 and 1.36 check ``full-pcpus-only`` first), while a pod-scope
pod with pod-level resources goes through ``AllocatePod`` again, which carves a new block
out of the free CPUs without giving back the old one. The model follows the kubelet, leak
included. This module is the model's own restart path and works on ``NodeModel``'s state.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from reconciler.allocator.devices import container_request, held_hints, pod_request
from reconciler.allocator.hints import Hint
from reconciler.allocator.memory_start import MEMORY_START_ERROR, start_outcomes
from reconciler.allocator.memory_state import MachineState
from reconciler.allocator.model import NodeModel
from reconciler.allocator.node_memory import update_reusable
from reconciler.allocator.placement import PodPlacement
from reconciler.allocator.rules import (
    MemoryAfterBlock,
    Refused,
    Work,
    container_cpus,
    eligible_init,
    in_start_order,
    pod_guaranteed_cpus,
    smt_alignment_error,
)
from reconciler.allocator.start import validate_state
from reconciler.kube import ContainerSpec, PodSpec

_POD_LEVEL_REFUSAL = ("TopologyAffinityError: pod with pod-level resources failed admission "
                      "under pod-scope topology manager")
_REFUSAL = "TopologyAffinityError: Resources cannot be allocated with Topology locality"


@dataclass(frozen=True, slots=True)
class Readmission:
    uid: str
    admitted: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class RestartResult:
    """``error`` is why the kubelet would not start (its own words); otherwise each pod's
    second admission, in order. A refused pod is killed and gives back what it held."""

    error: str | None
    readmitted: tuple[Readmission, ...] = ()
    # The error the kubelet gives under some of Go's map orders and not under others (the
    # memory manager's start check, memory_start.py): the model starts, and the kubelet
    # refusing so is one of its outcomes too. Beside an ``error``: the other entry a
    # validateState overlap may name (overlap_errors).
    may_fail: str | None = None


def restart(model: NodeModel, kubelet: str | None = None) -> RestartResult:
    """Restart the kubelet (minor version ``kubelet``, by default the model's) on
    ``model``'s state, changing the model as the kubelet would."""
    error = start_error(model)
    may_fail = None
    if error is None:
        error, may_fail = memory_start_error(model)
    if error is not None:
        # Where two entries overlap the default set, the kubelet names either.
        other = [e for e in overlap_errors(model) if e != error]
        return RestartResult(error, may_fail=other[0] if other else None)
    version = kubelet or model.config.kubelet_version
    out: list[Readmission] = []
    # The device manager starts from its checkpoint: devices of pods gone since it was last
    # written, and of pods killed now, stay taken until sources are ready, after the pods
    # are admitted again (its sweep skips before).
    held_back = _stale_devices(model)
    for key, placement in list(model.pods.items()):
        reason = _readmit(model, placement, smt_first=version in ("1.35", "1.36"))
        if reason is not None:
            before = {n: set(ids) for n, ids in model.dev_free.items()}
            model.release(*key)
            for name, ids in model.dev_free.items():
                held_back.setdefault(name, set()).update(ids - before.get(name, set()))
                ids.intersection_update(before.get(name, set()))
        out.append(Readmission(placement.uid, reason is None, reason or ""))
    for name, ids in held_back.items():
        model.dev_free.setdefault(name, set()).update(ids)
    return RestartResult(None, tuple(out), may_fail)


def _stale_devices(model: NodeModel) -> dict[str, set[str]]:
    """Takes out of the free devices those the device checkpoint still gives to pods that
    are gone, and returns them."""
    stale: dict[str, set[str]] = {}
    for key, by_resource in model._dev_ckpt.items():
        if key in model.pods:
            continue
        for name, ids in by_resource.items():
            gone = set(ids) & model.dev_free.get(name, set())
            model.dev_free.get(name, set()).difference_update(gone)
            stale.setdefault(name, set()).update(gone)
    return stale


def _state_entries(model: NodeModel) -> dict[str, dict[str, frozenset[int]]]:
    """The CPU manager state's entries, by pod UID and container, as far as validateState
    needs them: each container's own CPUs (a pod shared pool's container holds the pool),
    each ordinary init container's slice, and what else a pod holds under "*"."""
    assignments: dict[str, dict[str, frozenset[int]]] = {}
    for placement in model.pods.values():
        entries = {c.name: c.cpus for c in placement.containers if c.cpus}
        entries.update((name, cpus) for name, cpus in placement.init_slices if cpus)
        rest = placement.held.difference(*entries.values())
        if rest:
            entries["*"] = rest
        if entries:
            assignments[placement.uid] = entries
    for (uid, name), cpus in model.checkpointed.items():
        assignments.setdefault(uid, {})[name] = cpus
    return assignments


def overlap_errors(model: NodeModel) -> tuple[str, ...]:
    """Each error validateState may give for an entry that overlaps the default set: a CPU
    the kubelet claimed while in use can be in both (docs/design.md#allocator), and which
    entry it names first is Go's map order."""
    if not model.config.static:
        return ()
    strict = "strict-cpu-reservation" in model.config.options
    out = []
    for uid, entries in _state_entries(model).items():
        for name, cpus in entries.items():
            if cpus & model.default_set:
                _, error = validate_state(model.topo, model.reserved, model.default_set,
                                          {uid: {name: cpus}}, strict=strict)
                out.append(f"cpu manager start: {error}")
    return tuple(out)


def start_error(model: NodeModel) -> str | None:
    """``validateState`` of the static policy on the model's state, or ``None`` when it
    passes, in which case the model takes the default set the kubelet starts with."""
    if not model.config.static:
        return None
    assignments = _state_entries(model)
    strict = "strict-cpu-reservation" in model.config.options
    default, error = validate_state(model.topo, model.reserved, model.default_set,
                                    assignments, strict=strict,
                                    pod_sets=model.orphan_blocks.values())
    if error is None and default != model.default_set:
        # An empty default set with no container entry reads as a fresh state, whatever
        # pod-level blocks the checkpoint holds: leaked blocks, and the CPUs an earlier
        # restart leaked, are back in the default set (docs/design.md#allocator).
        for block in (*model.orphan_blocks.values(), model._unaccounted):
            model.free |= block - model.reserved
        model.orphan_blocks.clear()
        model._unaccounted = frozenset()
    return None if error is None else f"cpu manager start: {error}"


def memory_start_error(model: NodeModel) -> tuple[str | None, str | None]:
    """The Static memory policy's ``validateState``: the machine state must be what the
    assignments add up to (pod-level blocks for a pod that has them, else each container's)
    on a fresh machine; a restart that pinned a pod's memory again breaks that. Go's map
    order decides it where a node is under blocks of different NUMA sets
    (``memory_start.py``): the error when every order fails, and the error some orders
    give when others pass (the model then starts)."""
    if not model.memory_enabled:
        return None, None
    pods = [[p.block_memory] if p.block_memory else [bs for _, bs in p.mem_entries]
            for p in model.pods.values()]
    outcomes = start_outcomes(model.mem, pods, MachineState.fresh(model.topo.memory_types()))
    if not outcomes.may_start:
        return MEMORY_START_ERROR, None
    return None, MEMORY_START_ERROR if outcomes.may_fail else None


# ---- one pod admitted again -------------------------------------------------------------


def _readmit(model: NodeModel, old: PodPlacement, *, smt_first: bool) -> str | None:
    """``None`` when the pod is admitted again (the model updated), else the refusal."""
    cpus = old.path != "none" and model.config.static
    if not cpus and (old.block_memory or not (old.mem_entries or _allocates_again(model, old))):
        return _unpinned_again(model, old)
    # CPUs pinned, or (under the none CPU policy) only each container's memory.
    pod = old.spec
    wants = {c.name: _wants(old, c.name, init) if cpus else 0
             for c, init in in_start_order(pod)}
    held = _entries(old) if cpus else {}
    policy = model.config.topology_policy
    merged: tuple[frozenset[int] | None, bool] = (None, False)
    work = Work(free=set(model.free), mem=model.mem.copy())
    if policy != "none" and model.config.scope == "pod":
        ok, merged = _pod_hint_again(model, old, wants, held, cpus)
        if not ok:
            return _POD_LEVEL_REFUSAL if old.block else _REFUSAL
    if old.block:
        return _allocate_pod_again(model, old, merged)
    refusal = _containers_again(model, old, wants, held, work,
                                merged if model.config.scope == "pod" else None)
    if refusal is not None:
        return refusal
    model.mem = work.mem
    if smt_first and cpus:
        return _smt_again(model, old, wants)
    return None


def _allocates_again(model: NodeModel, old: PodPlacement) -> bool:
    """Whether a pod that holds no memory blocks meets the memory manager's per-container
    ``Allocate`` again at a restart: a Guaranteed pod's container asking memory, gone from
    the state (an ordinary init container, dropped once it ended), is placed again, under
    any topology policy, and the pod is refused when no NUMA node has room for it any more.
    A pod-scope pod with pod-level resources goes through ``AllocatePod`` instead."""
    pod = old.spec
    if model._skipped(pod):
        return False
    cfg = model.config
    if model._pod_level_set(pod) and cfg.scope == "pod" and cfg.topology_policy != "none":
        return False
    return any(model.memory_requested(pod, c) for c, _ in in_start_order(pod))


def _unpinned_again(model: NodeModel, old: PodPlacement) -> str | None:
    """A pod with no CPUs pinned: under the pod scope its pod-level memory, if pinned, is
    pinned again (:func:`_memory_pod_again`); otherwise only the devices it holds give
    hints, and nothing is allocated again."""
    if model.config.topology_policy == "none":
        return None
    if old.block_memory:
        return _memory_pod_again(model, old)
    if not (model.devices and pod_request(old.spec, model.devices)):
        return None
    if model.config.scope == "pod":
        ok = model.merge_held(None, None, 0, _held_device_hints(model, old))[0]
        return None if ok else _REFUSAL
    for c, _ in in_start_order(old.spec):
        devices = _held_device_hints(model, old, c)
        if devices and not model.merge_held(None, None, 0, devices)[0]:
            return _REFUSAL
    return None


def _held_device_hints(model: NodeModel, old: PodPlacement, c: ContainerSpec | None = None
                       ) -> dict[str, list[Hint] | None]:
    """The device manager's hints regenerated from the devices held (``held_hints``): the
    pod's, over every container's devices, or container ``c``'s (none held: from the free
    ones); empty when it asks none."""
    if not model.devices:
        return {}
    dev_held = model._dev_held.get(old.key, {})
    numa, version = model.topo.numa_nodes, model.config.kubelet_version
    if c is not None:
        request = container_request(c, model.devices)
        return held_hints(model.devices, request, dev_held.get(c.name, {}), model.dev_free,
                          numa, version) if request else {}
    request = pod_request(old.spec, model.devices)
    if not request:
        return {}
    union: dict[str, set[str]] = {}
    for by_resource in dev_held.values():
        for name, ids in by_resource.items():
            union.setdefault(name, set()).update(ids)
    return held_hints(model.devices, request, union, model.dev_free, numa, version)


def _pod_hint_again(model: NodeModel, old: PodPlacement, wants: dict[str, int],
                    held: dict[str, frozenset[int]], cpus: bool = True
                    ) -> tuple[bool, tuple[frozenset[int] | None, bool]]:
    """The pod scope's merge of the hints regenerated from what the pod holds: its
    devices, its CPUs, and its first container's memory blocks."""
    pod = old.spec
    work = Work(free=set(model.free), mem=model.mem)  # read only: hints
    mem_held = dict(old.mem_entries)
    requested = len(old.block) if old.block else pod_guaranteed_cpus(pod) if cpus else 0
    cpu = model.held_pod_cpu_list(requested, [(wants[n], held.get(n)) for n in wants])
    first = next((mem_held[n] for n in wants if n in mem_held), None)
    return model.merge_held(cpu, model.pod_memory_hints(pod, work, first),
                            _asked(model, model.pod_memory_requested(pod)),
                            _held_device_hints(model, old))


def _containers_again(model: NodeModel, old: PodPlacement, wants: dict[str, int],
                     held: dict[str, frozenset[int]], work: Work,
                     pod_hint: tuple[frozenset[int] | None, bool] | None) -> str | None:
    """Each container admitted again in order: under the container scope the merge of
    the hints regenerated from its devices, CPUs and memory blocks (``pod_hint`` is the pod
    scope's), then the memory manager's ``Allocate``, which skips a container in its state
    but places again one it dropped (an ordinary init container, gone once the next
    container was added) and then drops it again. The refusal, or ``None``."""
    pod = old.spec
    mem_held = dict(old.mem_entries)
    policy = model.config.topology_policy
    merged: tuple[frozenset[int] | None, bool] = pod_hint or (None, False)
    for c, ordinary_init in in_start_order(pod):
        n = wants[c.name]
        asked = 0 if model._skipped(pod) else _asked(model, model.memory_requested(pod, c))
        devices = _held_device_hints(model, old, c) if pod_hint is None else {}
        empty = not asked and c.name not in mem_held and _allocates_nothing(model, pod)
        if pod_hint is None and policy != "none" and any((n, asked, devices, empty)):
            cpu = model.held_cpu_hints(n, held.get(c.name, frozenset())) if n else None
            mem = model.memory_hints(pod, c, work, mem_held.get(c.name))
            ok, merged = model.merge_held(cpu, mem, asked, devices)
            if not ok:
                return _REFUSAL
        if asked and c.name in mem_held:
            update_reusable(work.mem_reuse, False, mem_held[c.name])
            continue
        refusal = _allocate_again(model, pod, c, ordinary_init, merged, work) \
            if asked or empty else None
        if refusal is not None:
            return refusal
    for c in pod.init_containers:
        if not c.sidecar and c.name in work.mem_entries:
            work.mem.release(work.mem_entries.pop(c.name))
    return None


def _allocate_again(model: NodeModel, pod: PodSpec, c: ContainerSpec, ordinary_init: bool,
                    merged: tuple[frozenset[int] | None, bool], work: Work) -> str | None:
    """The memory manager's ``Allocate`` for a container its state lacks: the refusal,
    or ``None``."""
    try:
        model.allocate_memory(pod, c, ordinary_init, merged, work)
    except Refused as exc:
        return f"UnexpectedAdmissionError: Allocate failed due to {exc}"
    return None


def _allocates_nothing(model: NodeModel, pod: PodSpec) -> bool:
    """Whether the memory manager's ``Allocate`` goes on for a container of ``pod`` that
    asks nothing: 1.36's does for a pod with pod-level resources, and refuses a hint that
    breaks a group (``allocate_memory``), so a dropped init container meets that check
    again at a restart."""
    return (model.memory_enabled and not model._skipped(pod)
            and model.config.kubelet_version == "1.36" and model._pod_level_set(pod))


def _asked(model: NodeModel, requested: dict[str, int]) -> int:
    if not model.memory_enabled:
        return 0
    return requested.get("memory", 0) or sum(requested.values())


def _memory_pod_again(model: NodeModel, old: PodPlacement) -> str | None:
    """A pod whose only pinned resource is its pod-level memory: the pod scope merges the
    hints regenerated from its devices and its first container's memory blocks, and
    ``AllocatePod`` pins the pod's memory once more, the old blocks staying reserved."""
    pod = old.spec
    policy = model.config.topology_policy
    if policy == "none" or model.config.scope != "pod":
        return None
    work = Work(free=set(model.free), mem=model.mem.copy())
    mem_held = dict(old.mem_entries)
    first = next((mem_held[c.name] for c, _ in in_start_order(pod) if c.name in mem_held),
                 None)
    ok, merged = model.merge_held(None, model.pod_memory_hints(pod, work, first),
                                  _asked(model, model.pod_memory_requested(pod)),
                                  _held_device_hints(model, old))
    if not ok:
        return _POD_LEVEL_REFUSAL
    try:
        blocks = model.allocate_pod_memory(pod, merged, work)
    except Refused as exc:
        return f"UnexpectedAdmissionError: {exc}"
    model.mem = work.mem
    model.pods[old.key] = model.add_containers(
        replace(old, block_memory=blocks, mem_entries=tuple(work.mem_entries.items())),
        work.mem)
    return None


def _wants(placement: PodPlacement, name: str, ordinary_init: bool) -> int:
    """The CPUs the static policy gives the container (``guaranteedCPUs``)."""
    pod = placement.spec
    spec = next(c for c in (*pod.init_containers, *pod.containers) if c.name == name)
    eligible = eligible_init(pod, spec) if ordinary_init else pod.eligible(spec)
    return container_cpus(pod, spec) if eligible else 0


def _entries(placement: PodPlacement) -> dict[str, frozenset[int]]:
    """Each container's CPUs in the CPU manager's state. A pod-level pod's containers are
    all there, those without a slice with (a part of) its block."""
    entries = {c.name: c.exclusive for c in placement.containers if c.exclusive}
    entries.update(placement.init_slices)
    if placement.block:
        pool = placement.block.difference(*entries.values())
        for c, _ in in_start_order(placement.spec):
            entries.setdefault(c.name, pool or placement.block)
    return entries


def _allocate_pod_again(model: NodeModel, old: PodPlacement,
                        merged: tuple[frozenset[int] | None, bool]) -> str | None:
    """``AllocatePod`` once more: a new block from the free CPUs, and the pod's memory
    pinned again; the old block and memory leak."""
    work = Work(free=set(model.free), mem=model.mem.copy())
    try:
        placement = model._pod_scope(old.spec, len(old.block), work, merged)
    except MemoryAfterBlock as exc:
        # The CPU manager's new block is the pod's now, and goes back with it; the old one
        # is in no entry any more.
        model._unaccounted |= old.block
        model.pods[old.key] = replace(old, block=frozenset(), init_held=frozenset(),
                                      containers=tuple(replace(c, exclusive=frozenset())
                                                       for c in old.containers))
        return f"UnexpectedAdmissionError: {exc}"
    except Refused as exc:
        return f"UnexpectedAdmissionError: {exc}"
    model.free = work.free
    model.mem = work.mem
    # The devices stay where they are: AllocatePod does not touch them.
    devices = {c.name: c.devices for c in old.containers}
    placement = model.add_containers(placement, work.mem)
    model.pods[old.key] = replace(placement, device_errors=old.device_errors, containers=tuple(
        replace(c, devices=devices.get(c.name, ())) for c in placement.containers))
    model._unaccounted |= old.block
    return None


def _smt_again(model: NodeModel, old: PodPlacement, wants: dict[str, int]) -> str | None:
    """1.35 and 1.36 check ``full-pcpus-only`` before they find the container in their
    state: refused when too few whole cores are free now."""
    if "full-pcpus-only" not in model.config.options:
        return None
    tpc = model.topo.threads_per_core
    physical = len(model.default_set - model._reserved_cores)
    for n in wants.values():
        if n and (n % tpc or n > physical):
            return "SMTAlignmentError: " + smt_alignment_error(
                n, tpc, None if n % tpc else physical)
    return None


__all__ = ["Readmission", "RestartResult", "restart", "start_error"]
