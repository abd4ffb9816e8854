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
from reconciler.allocator.model import NodeModel
from reconciler.allocator.placement import PodPlacement
from reconciler.allocator.rules import (
    Refused,
    Work,
    container_cpus,
    eligible_init,
    in_start_order,
    pod_guaranteed_cpus,
    smt_alignment_error,
)
from reconciler.allocator.start import validate_state

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


def restart(model: NodeModel, kubelet: str | None = None) -> RestartResult:
    """Restart the kubelet (minor version ``kubelet``, by default the model's) on
    ``model``'s state, changing the model as the kubelet would."""
    error = start_error(model)
    if error is not None:
        return RestartResult(error)
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
    return RestartResult(None, tuple(out))


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


def start_error(model: NodeModel) -> str | None:
    """``validateState`` of the static policy on the model's state, or ``None`` when it
    passes, in which case the model takes the default set the kubelet starts with."""
    if not model.config.static:
        return None
    assignments: dict[str, dict[str, frozenset[int]]] = {}
    for placement in model.pods.values():
        if placement.held:
            assignments[placement.uid] = {"*": placement.held}
    for (uid, name), cpus in model.checkpointed.items():
        assignments.setdefault(uid, {})[name] = cpus
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


# ---- one pod admitted again -------------------------------------------------------------


def _readmit(model: NodeModel, old: PodPlacement, *, smt_first: bool) -> str | None:
    """``None`` when the pod is admitted again (the model updated), else the refusal."""
    pinned = old.path != "none" and model.config.static
    pod = old.spec
    wants = {c.name: _wants(old, c.name, init) if pinned else 0
             for c, init in in_start_order(pod)}
    held = _entries(old) if pinned else {}
    hint: frozenset[int] | None = None
    asks_devices = bool(model.devices) and bool(pod_request(pod, model.devices))
    if model.config.topology_policy != "none" and (pinned or asks_devices):
        ok, hint = _held_affinity(model, old, wants, held)
        if not ok:
            return _POD_LEVEL_REFUSAL if old.block else _REFUSAL
    if not pinned:
        return None  # nothing pinned: nothing to allocate
    if old.block:
        return _allocate_pod_again(model, old, hint)
    if smt_first:
        return _smt_again(model, old, wants)
    return None


def _held_affinity(model: NodeModel, old: PodPlacement, wants: dict[str, int],
                   held: dict[str, frozenset[int]]) -> tuple[bool, frozenset[int] | None]:
    """The topology manager's merge for a pod admitted again: the CPU manager's hints
    regenerated from the CPUs held and, first, the device manager's from the devices held
    (``held_hints``). Pod scope: one merge for the pod; container scope: one a container."""
    pod = old.spec
    dev_held = model._dev_held.get(old.key, {})
    numa, version = model.topo.numa_nodes, model.config.kubelet_version
    if model.config.scope == "pod":
        requested = len(old.block) if old.block else pod_guaranteed_cpus(pod) \
            if any(wants.values()) else 0
        containers = [(wants[n], held.get(n)) for n in wants]
        request = pod_request(pod, model.devices)
        if not request:
            return model.held_pod_hint(requested, containers)
        union: dict[str, set[str]] = {}
        for by_resource in dev_held.values():
            for name, ids in by_resource.items():
                union.setdefault(name, set()).update(ids)
        devices = held_hints(model.devices, request, union, model.dev_free, numa, version)
        return model.merge_with_devices(devices, model.held_pod_cpu_list(requested,
                                                                         containers))
    for c, _ in in_start_order(pod):
        n, mine = wants[c.name], held.get(c.name, frozenset())
        request = container_request(c, model.devices)
        if request:
            devices = held_hints(model.devices, request, dev_held.get(c.name, {}),
                                 model.dev_free, numa, version)
            ok = model.merge_with_devices(
                devices, model.held_cpu_hints(n, mine) if n else None)[0]
        else:
            ok = not n or model.merge_cpu_hints(model.held_cpu_hints(n, mine))[0]
        if not ok:
            return False, None
    return True, None


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


def _allocate_pod_again(model: NodeModel, old: PodPlacement, hint: frozenset[int] | None
                        ) -> str | None:
    """``AllocatePod`` once more: a new block from the free CPUs; the old one leaks."""
    work = Work(free=set(model.free), mem_free=dict(model.mem_free))
    try:
        placement = model._pod_scope(old.spec, len(old.block), work, hint)
    except Refused as exc:
        return f"UnexpectedAdmissionError: {exc}"
    model.free = work.free
    # The devices stay where they are: AllocatePod does not touch them.
    devices = {c.name: c.devices for c in old.containers}
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
