"""The static policy's rules about one pod, shared by every part of the allocator model
(docs/design.md#allocator): what each container asks for and in which order containers
start, the pod scope's shared-pool check, the kubelet's refusal texts, and the working state
of one admission. Every refusal is raised as one :class:`Refused`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from reconciler.allocator.devices import DeviceWork
from reconciler.allocator.hints import (
    Hint,
)
from reconciler.allocator.memory_state import MachineState, Reusable
from reconciler.allocator.placement import ContainerTruth, PodPlacement
from reconciler.kube import ContainerSpec, PodSpec
from reconciler.snapshot import DeviceAlloc, MemoryBlock


class Refused(Exception):
    """The kubelet would not admit the pod; the message is its reason."""


def smt_alignment_error(requested: int, per_core: int, available: int | None = None) -> str:
    """The kubelet's ``SMTAlignmentError`` text; ``available`` when free physical CPUs, not
    the request's size, are the cause."""
    if available is None:
        return (f"SMT Alignment Error: requested {requested} cpus not multiple cpus per "
                f"core = {per_core}")
    return (f"SMT Alignment Error: not enough free physical CPUs: available physical CPUs = "
            f"{available}, requested CPUs = {requested}, CPUs per core = {per_core}")


def not_enough_cpus(requested: int, available: int) -> str:
    """The kubelet's text when a take has too few CPUs to choose from."""
    return (f"not enough cpus available to satisfy request: requested={requested}, "
            f"available={available}")


def mem_limit(c: ContainerSpec) -> int:
    r = c.resources
    return r.memory_limit if r.memory_limit is not None else (r.memory_request or 0)


def container_cpus(pod: PodSpec, c: ContainerSpec) -> int:
    """The kubelet's guaranteed CPUs of one container: its whole-CPU request in a
    Guaranteed pod, else 0."""
    if not pod.guaranteed:
        return 0
    return c.resources.integer_cpus or 0


def pod_guaranteed_cpus(pod: PodSpec) -> int:
    """The CPUs the kubelet sizes a pod's hint for: the larger of what the long-running
    containers hold together and what any regular init container holds beside the sidecars
    started before it."""
    init_peak = sidecars = 0
    for c in pod.init_containers:
        cpus = container_cpus(pod, c)
        if c.sidecar:
            sidecars += cpus
        else:
            init_peak = max(init_peak, sidecars + cpus)
    apps = sum(container_cpus(pod, c) for c in pod.containers)
    return max(init_peak, apps + sidecars)


def pod_memory(pod: PodSpec) -> int:
    """Memory a Guaranteed pod's hint is sized for (the Static memory manager's rule)."""
    if not pod.guaranteed:
        return 0
    running = sum(mem_limit(c) for c in pod.long_running)
    init = max((mem_limit(c) for c in pod.init_containers if not c.sidecar), default=0)
    return max(running, init)


def in_start_order(pod: PodSpec) -> Iterator[tuple[ContainerSpec, bool]]:
    """Containers in the order the kubelet admits them, with whether each is an ordinary
    (run-to-completion) init container."""
    for c in pod.init_containers:
        yield c, not c.sidecar
    for c in pod.containers:
        yield c, False


def validate_pod_scope(pod: PodSpec) -> None:
    """``validatePodScopeResources``: the pod shared pool must not be empty for a
    container that runs on it. Nothing else about the budget is checked before the block is
    taken: a slice that does not fit fails the carving afterwards."""
    budget = pod.budget_cpus or 0
    exclusive = 0
    shared = False
    for c in pod.init_containers:
        if c.sidecar:
            n = container_cpus(pod, c) if pod.eligible(c) else 0
            exclusive += n
            shared = shared or not n
            continue
        if not (container_cpus(pod, c) if eligible_init(pod, c) else 0) and exclusive >= budget:
            raise Refused(f"empty pod shared pool: sidecars started before init container "
                           f"{c.name} use the whole pod budget of {budget} CPUs")
    for c in pod.containers:
        n = container_cpus(pod, c) if pod.eligible(c) else 0
        exclusive += n
        shared = shared or not n
    if shared and exclusive >= budget:
        names = [c.name for c in pod.long_running if not pod.eligible(c)]
        raise Refused(f"empty pod shared pool: exclusive containers use the whole pod "
                       f"budget of {budget} CPUs, and {', '.join(names)} would need the "
                       "shared pool")


class Leaked(Refused):
    """A refusal after the pod's block left the default set: the kubelet keeps it out."""

    def __init__(self, message: str, block: frozenset[int]) -> None:
        super().__init__(message)
        self.block = block


class MemoryAfterBlock(Refused):
    """The memory manager's ``AllocatePod`` refuses after the CPU manager's took the pod's
    block (which the CPU manager gives back with the pod's last container)."""


class Auto:
    """No hint given: the topology manager works it out."""


AUTO = Auto()


@dataclass(slots=True)
class Work:
    """A tentative change to the node state, applied only when a pod is admitted."""

    free: set[int]
    mem: MachineState
    dev: DeviceWork | None = None  # None on a node without devices
    # The memory manager's entries for the pod being placed (every container's blocks, as
    # its state holds them) and the init containers' memory later containers may reuse.
    mem_entries: dict[str, tuple[MemoryBlock, ...]] = field(default_factory=dict)
    mem_reuse: Reusable = field(default_factory=dict)
    pod_memory: tuple[MemoryBlock, ...] = ()


@dataclass(slots=True)
class Slices:
    """Exclusive CPUs and memory handed out container by container."""

    exclusive: dict[str, frozenset[int]] = field(default_factory=dict)
    memory: dict[str, tuple[MemoryBlock, ...]] = field(default_factory=dict)
    reusable: set[int] = field(default_factory=set)
    devices: dict[str, tuple[DeviceAlloc, ...]] = field(default_factory=dict)
    init: dict[str, frozenset[int]] = field(default_factory=dict)  # ordinary init containers
    # Containers whose start fails for want of devices (``NodePaths._devices_at_start``).
    device_errors: dict[str, str] = field(default_factory=dict)


def shown_hints(devices: tuple[tuple[str, list[Hint] | None], ...]
           ) -> tuple[tuple[str, list[Hint]], ...]:
    return tuple((name, hints or []) for name, hints in devices)


def with_devices(p: PodPlacement, devices: Mapping[str, tuple[DeviceAlloc, ...]],
                 errors: Mapping[str, str] | None = None) -> PodPlacement:
    if errors:
        p = replace(p, device_errors=tuple(sorted(errors.items())))
    if not any(devices.values()):
        return p
    return replace(p, containers=tuple(replace(c, devices=devices.get(c.name, ()))
                                       for c in p.containers))


def all_shared(pod: PodSpec, note: str) -> PodPlacement:
    containers = tuple(
        ContainerTruth(c.name, c.sidecar, False, "node_shared", "node_shared",
                       frozenset(), frozenset())
        for c in pod.long_running)
    return PodPlacement(pod.namespace, pod.name, pod.uid, pod, "none", frozenset(), (),
                        containers, None, note)


def eligible_init(pod: PodSpec, c: ContainerSpec) -> bool:
    """An ordinary init container gets (reusable) exclusive CPUs under the same rule."""
    if not pod.guaranteed:
        return False
    r = c.resources
    return r.guaranteed and r.integer_cpus is not None
