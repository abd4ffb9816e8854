"""``plan``: legacy vs pod-level reservation of pod templates, the kubelet's admission verdict,
an optional predicted placement, and a suggested pod budget (pure)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from reconciler.allocator.devices import NodeDevices
from reconciler.allocator.model import ModelConfig, NodeModel, PodPlacement, Rejection
from reconciler.allocator.topology import MAX_CPUS, CPUTopology, from_spec
from reconciler.estimates import spec_legacy_cost
from reconciler.kube import ContainerSpec, PodSpec, Resources
from reconciler.manifests import PodTemplate
from reconciler.snapshot import DeviceAlloc


@dataclass(frozen=True, slots=True)
class ContainerPlan:
    name: str
    sidecar: bool
    eligible: bool
    exclusive_cpus: int
    cpus: frozenset[int] | None  # predicted cpuset (with a topology), else None
    assignment: str | None = None
    devices: tuple[DeviceAlloc, ...] = ()  # its devices, one entry a device and NUMA node


@dataclass(frozen=True, slots=True)
class Suggestion:
    budget_cpus: int
    memory_bytes: int | None
    shared_containers: tuple[str, ...]  # containers whose CPU request should be removed
    saving_cpus: int
    admitted: bool
    reason: str | None

    def resources(self) -> dict[str, dict[str, str]]:
        block = {"cpu": str(self.budget_cpus)}
        if self.memory_bytes:
            block["memory"] = format_bytes(self.memory_bytes)
        return {"requests": dict(block), "limits": dict(block)}


@dataclass(frozen=True, slots=True)
class PodPlan:
    template: PodTemplate
    qos: str
    budget_cpus: int | None
    legacy_cpus: int
    pod_level_cpus: int
    reclaimed_cpus: int
    admitted: bool
    reason: str | None
    containers: tuple[ContainerPlan, ...]
    cpus: frozenset[int] | None = None
    numa_nodes: tuple[int, ...] | None = None
    suggestion: Suggestion | None = None
    # The memory the Static memory manager pins for the pod (0: none, not Guaranteed) and,
    # when admitted on a node, the NUMA nodes it is pinned on (empty: not pinned).
    memory_bytes: int = 0
    memory_numa: tuple[int, ...] | None = None
    # A refusal's cause in plain words, sharpened by what the pod asks (explain.diagnose).
    cause: str | None = None
    cause_words: str | None = None
    # Extended resources the pod asks that the node has no device of: the kubelet ignores
    # them, the scheduler would not place the pod there.
    missing_devices: tuple[str, ...] = ()
    # Why the API server refuses the pod whatever the kubelet would do with it (a pod budget
    # smaller than its containers' requests), for a pod the kubelet would admit.
    api_refusal: str | None = None


def format_bytes(n: int) -> str:
    for suffix, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n % size == 0:
            return f"{n // size}{suffix}"
    return str(n)


def _legacy_pinned(pod: PodSpec) -> int:
    """What the per-container model pins for this pod: its eligible containers' CPUs."""
    return sum(c.resources.integer_cpus or 0 for c in pod.long_running if pod.eligible(c))


def _scratch_model(pod: PodSpec, config: ModelConfig) -> NodeModel:
    """A node big enough for one pod, so only the kubelet's rules can reject it."""
    need = sum(max(1, math.ceil((c.resources.cpu_request_m or 0) / 1000))
               for c in pod.long_running + pod.init_containers)
    if pod.resources is not None and pod.resources.cpu_request_m:
        need += math.ceil(pod.resources.cpu_request_m / 1000)
    # No bigger than the largest node the model knows: a pod that asks more than that is
    # refused with the kubelet's own reason, as it would be on any real node.
    cores = min(max(64, need + 1), MAX_CPUS)
    # One NUMA node, where best-effort admits what fits and refuses what does not with the
    # CPU manager's reason; "none" stays, as under it the kubelet carves no pod-level block
    # (docs/design.md#allocator).
    policy = "none" if config.topology_policy == "none" else "best-effort"
    scratch = replace(config, topology_policy=policy, reserved_cpus=None, reserved_cpu_m=0,
                      memory_policy="None", options=frozenset())
    return NodeModel(from_spec(f"1x{cores}x1"), scratch)


def _verdict(model: NodeModel, pod: PodSpec) -> tuple[PodPlacement | Rejection, bool]:
    result = model.admit(pod)
    return result, isinstance(result, PodPlacement)


def _split_for_budget(pod: PodSpec) -> tuple[list[ContainerSpec], list[ContainerSpec],
                                              list[ContainerSpec]]:
    """(1-CPU exclusive containers to move into the shared pool, exclusive containers kept,
    containers that share already)."""
    exclusive = [c for c in pod.long_running if pod.eligible(c)]
    largest = max(exclusive, key=lambda c: c.resources.integer_cpus or 0, default=None)
    candidates = [c for c in exclusive if c is not largest and c.resources.integer_cpus == 1]
    kept = [c for c in exclusive if c not in candidates]
    shared = [c for c in pod.long_running if not pod.eligible(c)]
    return candidates, kept, shared


def _suggested_memory(pod: PodSpec) -> int | None:
    """The pod memory budget: the long-running containers' limits, or the largest ordinary
    init container's when larger; ``None`` when a container has no limit."""
    mems = [c.resources.memory_limit for c in pod.long_running]
    if not all(mems):
        return None
    memory = sum(m for m in mems if m)
    init_mem = [c.resources.memory_limit or 0 for c in pod.init_containers if not c.sidecar]
    return max([memory, *init_mem])


def _with_budget(pod: PodSpec, budget: int, memory: int,
                 stripped: list[ContainerSpec]) -> PodSpec:
    """``pod`` with a pod budget, the ``stripped`` containers' CPU requests removed."""
    def strip(c: ContainerSpec) -> ContainerSpec:
        if c not in stripped:
            return c
        r = c.resources
        return replace(c, resources=replace(r, cpu_request_m=None, cpu_limit_m=None))

    return replace(pod, resources=Resources(budget * 1000, budget * 1000, memory, memory),
                   containers=tuple(strip(c) for c in pod.containers),
                   init_containers=tuple(strip(c) for c in pod.init_containers),
                   qos_class=None)


def _whole_cores(budget: int, config: ModelConfig, topology: CPUTopology | None) -> int:
    """``budget`` rounded up to whole physical cores where ``full-pcpus-only`` asks for them
    (the kubelet's SMTAlignmentError refuses an odd pod budget on an SMT-2 node): the extra
    threads go to the pod shared pool."""
    tpc = topology.threads_per_core if topology is not None else 1
    if "full-pcpus-only" not in config.options or tpc == 1:
        return budget
    return -(-budget // tpc) * tpc


def suggest(pod: PodSpec, config: ModelConfig,
            topology: CPUTopology | None = None) -> Suggestion | None:
    """A pod budget for a template without one: integer containers stay exclusive, 1-CPU
    padding (every 1-CPU exclusive container but the largest exclusive one) and the
    non-eligible containers share a pod shared pool.

    The verdict is the one :func:`plan_templates` gives the suggested pod under the same
    configuration: on an empty node of ``topology`` when there is one (its SMT width,
    reserved CPUs and policy options apply), else on a scratch node (docs/plan.md#suggest)."""
    if pod.has_pod_cpu_budget or not pod.guaranteed or not pod.long_running:
        return None
    candidates, kept, shared = _split_for_budget(pod)
    if not candidates and not shared:
        return None  # everything needs its own cores: a budget would change nothing
    millis = sum((c.resources.cpu_limit_m or c.resources.cpu_request_m or 0) for c in shared)
    pool = max(1, math.ceil(millis / 1000))
    budget = _whole_cores(sum(c.resources.integer_cpus or 0 for c in kept) + pool, config,
                          topology)
    memory = _suggested_memory(pod)
    new_pod = _with_budget(pod, budget, memory or 0, candidates)
    budget_config = replace(config, pod_level=True)
    model = NodeModel(topology, budget_config) if topology is not None else \
        _scratch_model(new_pod, budget_config)
    result, ok = _verdict(model, new_pod)
    return Suggestion(budget, memory, tuple(c.name for c in candidates),
                      _legacy_pinned(pod) - budget, ok,
                      None if ok else getattr(result, "reason", None))


def _placed(result: PodPlacement, pod: PodSpec, topology: CPUTopology | None
            ) -> tuple[ContainerPlan, ...]:
    out = []
    for c in result.containers:
        spec = pod.container(c.name)
        eligible = spec is not None and pod.eligible(spec)
        out.append(ContainerPlan(c.name, c.sidecar, eligible, len(c.exclusive),
                                 c.cpus if topology is not None else None, c.assignment,
                                 c.devices))
    return tuple(out)


def _unplaced(pod: PodSpec) -> tuple[ContainerPlan, ...]:
    out = []
    for c in pod.long_running:
        eligible = pod.eligible(c)
        out.append(ContainerPlan(c.name, c.sidecar, eligible,
                                 (c.resources.integer_cpus or 0) if eligible else 0, None))
    return tuple(out)


def _memory_numa(result: PodPlacement) -> tuple[int, ...]:
    blocks = [*result.block_memory, *(b for c in result.containers for b in c.memory)]
    return tuple(sorted({n for b in blocks if b.memory_type == "memory"
                         for n in b.numa_nodes}))


def missing_devices(pod: PodSpec, model: NodeModel) -> tuple[str, ...]:
    """Extended resources ``pod`` asks that ``model``'s node has no device of: the
    kubelet's admission drops them (``removeMissingExtendedResources``), so only the
    scheduler keeps the pod off such a node."""
    served = model.devices.by_name
    asked = {name for c in (*pod.init_containers, *pod.containers)
             for name, _ in c.resources.extended}
    return tuple(sorted(asked - served.keys()))


def _plan_one(t: PodTemplate, pod: PodSpec, model: NodeModel, config: ModelConfig,
              topology: CPUTopology | None, want_suggestion: bool) -> PodPlan:
    from reconciler.allocator.explain import budget_short, diagnose, pinned_memory

    result, admitted = _verdict(model, pod)
    pod_path = config.pod_level and pod.has_pod_cpu_budget and pod.guaranteed \
        and pod.budget_cpus is not None
    legacy = spec_legacy_cost(pod) if pod_path else _legacy_pinned(pod)
    cpus: frozenset[int] | None = None
    numa: tuple[int, ...] | None = None
    cause: tuple[str, str] | None = None
    mem_numa: tuple[int, ...] | None = None
    if isinstance(result, PodPlacement):
        pinned = len(result.held)
        reason = result.note or None
        containers = _placed(result, pod, topology)
        if topology is not None:
            cpus = result.held
            numa = tuple(sorted(result.numa_nodes(topology)))
            mem_numa = _memory_numa(result)
    else:
        reason = result.reason
        # A refusal that leaves CPUs behind carves a pod block, after every hint was merged:
        # the causes that look at the node (memory, devices) are settled before that.
        cause = diagnose(model, pod, result.reason)
        pinned = _legacy_pinned(pod)
        if pod_path and config.scope == "pod" and pod.budget_cpus is not None:
            pinned = pod.budget_cpus
        containers = _unplaced(pod)
    return PodPlan(
        template=t, qos=pod.qos, budget_cpus=pod.budget_cpus, legacy_cpus=legacy,
        pod_level_cpus=pinned, reclaimed_cpus=legacy - pinned, admitted=admitted,
        reason=reason, containers=containers, cpus=cpus, numa_nodes=numa,
        suggestion=suggest(pod, config, topology) if want_suggestion else None,
        memory_bytes=pinned_memory(pod, config) if config.memory_policy == "Static" else 0,
        memory_numa=mem_numa, cause=cause[0] if cause else None,
        cause_words=cause[1] if cause else None,
        missing_devices=missing_devices(pod, model) if topology is not None else (),
        api_refusal=_api_refusal(budget_short(pod)) if admitted else None)


def _api_refusal(short: tuple[str, str] | None) -> str | None:
    """The API server's rule (k8s.io/kubernetes v1.37.2 pkg/apis/core/validation,
    validatePodResourceConsistency: pod-level requests cover the containers')."""
    return None if short is None else short[1]


def plan_templates(templates: Sequence[PodTemplate], config: ModelConfig, *,
                   topology: CPUTopology | None = None, want_suggestion: bool = False,
                   node: NodeModel | None = None, devices: NodeDevices | None = None
                   ) -> list[PodPlan]:
    """One :class:`PodPlan` per template. With a ``topology`` the templates are placed on
    one empty node of that shape (with ``devices``, its device-plugin devices), with a
    ``node`` on that node as it stands (a live node, see :mod:`reconciler.allocator.live`);
    in order, one pod each, as the kubelet would."""
    if node is not None:
        topology, config = node.topo, node.config
    elif topology is not None:
        node = NodeModel(topology, config, devices)
    plans = []
    for i, t in enumerate(templates):
        pod = t.pod
        if node is not None and (pod.namespace, pod.name) in node.pods:
            pod = replace(pod, name=f"{pod.name}-{i}")
        model = node if node is not None else _scratch_model(pod, config)
        plans.append(_plan_one(t, pod, model, config, topology, want_suggestion))
    return plans
