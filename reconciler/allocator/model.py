"""The kubelet's static CPU policy, topology manager and Static memory manager, as a model
(docs/design.md#allocator).

Three paths:

* legacy per-container allocation: every eligible container gets exclusive CPUs from the
  node pool (pods without a pod budget, or kubelets without pod-level resource managers);
* pod scope with a pod budget: one NUMA-aligned block of the budget's size, sidecar slices,
  init-container reuse, app slices, and the pod shared pool;
* container scope with a pod budget: eligible containers get exclusive CPUs from the node
  pool, the rest run on the node shared pool, within the budget.

``NodeModel.admit`` either places a pod and records its :class:`PodPlacement` (the ground
truth: every container's assignment and cpuset) or returns a :class:`Rejection` with the
kubelet's reason, leaving the state untouched. Every refusal is raised as one
:class:`_Refused` and turned into a :class:`Rejection` in one place. ``release`` returns
every CPU and byte. ``NodeModel.from_checkpoint`` starts from the kubelet's own state (the
per-container exclusive sets and the default set), whose containers ``remove_container``
removes one at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from reconciler.allocator.config import ModelConfig, ModelError
from reconciler.allocator.devices import DevicesUnavailable, DeviceWork, NodeDevices
from reconciler.allocator.hints import (
    Hint,
    HintError,
    HintRecord,
    MaskTable,
    kubelet_merge,
    merge,
)
from reconciler.allocator.placement import ContainerTruth, PodPlacement, Rejection
from reconciler.allocator.resize import take_distributed_for_resize
from reconciler.allocator.take import (
    policy_taker,
    take_for_resize,
    take_with_hint,
)
from reconciler.allocator.topology import CPUTopology
from reconciler.cpuset import format_cpuset
from reconciler.kube import ContainerSpec, PodSpec
from reconciler.pools import CPU_POOLS as POOLS
from reconciler.pools import Assignment
from reconciler.snapshot import DeviceAlloc, MemoryBlock

__all__ = [
    "POOLS", "Assignment", "ContainerTruth", "ModelConfig", "ModelError", "NodeModel",
    "PodPlacement", "Rejection", "not_enough_cpus", "pod_guaranteed_cpus",
    "smt_alignment_error",
]


class _Refused(Exception):
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


def _mem_limit(c: ContainerSpec) -> int:
    r = c.resources
    return r.memory_limit if r.memory_limit is not None else (r.memory_request or 0)


def _container_cpus(pod: PodSpec, c: ContainerSpec) -> int:
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
        cpus = _container_cpus(pod, c)
        if c.sidecar:
            sidecars += cpus
        else:
            init_peak = max(init_peak, sidecars + cpus)
    apps = sum(_container_cpus(pod, c) for c in pod.containers)
    return max(init_peak, apps + sidecars)


def _pod_memory(pod: PodSpec) -> int:
    """Memory a Guaranteed pod's hint is sized for (the Static memory manager's rule)."""
    if not pod.guaranteed:
        return 0
    running = sum(_mem_limit(c) for c in pod.long_running)
    init = max((_mem_limit(c) for c in pod.init_containers if not c.sidecar), default=0)
    return max(running, init)


def _in_start_order(pod: PodSpec) -> Iterator[tuple[ContainerSpec, bool]]:
    """Containers in the order the kubelet admits them, with whether each is an ordinary
    (run-to-completion) init container."""
    for c in pod.init_containers:
        yield c, not c.sidecar
    for c in pod.containers:
        yield c, False


def _validate_pod_scope(pod: PodSpec) -> None:
    """``validatePodScopeResources``: the pod shared pool must not be empty for a
    container that runs on it. Nothing else about the budget is checked before the block is
    taken: a slice that does not fit fails the carving afterwards."""
    budget = pod.budget_cpus or 0
    exclusive = 0
    shared = False
    for c in pod.init_containers:
        if c.sidecar:
            n = _container_cpus(pod, c) if pod.eligible(c) else 0
            exclusive += n
            shared = shared or not n
            continue
        if not (_container_cpus(pod, c) if _eligible_init(pod, c) else 0) and exclusive >= budget:
            raise _Refused(f"empty pod shared pool: sidecars started before init container "
                           f"{c.name} use the whole pod budget of {budget} CPUs")
    for c in pod.containers:
        n = _container_cpus(pod, c) if pod.eligible(c) else 0
        exclusive += n
        shared = shared or not n
    if shared and exclusive >= budget:
        names = [c.name for c in pod.long_running if not pod.eligible(c)]
        raise _Refused(f"empty pod shared pool: exclusive containers use the whole pod "
                       f"budget of {budget} CPUs, and {', '.join(names)} would need the "
                       "shared pool")


class _Leaked(_Refused):
    """A refusal after the pod's block left the default set: the kubelet keeps it out."""

    def __init__(self, message: str, block: frozenset[int]) -> None:
        super().__init__(message)
        self.block = block


class _Auto:
    """No hint given: the topology manager works it out."""


_AUTO = _Auto()


@dataclass(slots=True)
class _Work:
    """A tentative change to the node state, applied only when a pod is admitted."""

    free: set[int]
    mem_free: dict[int, int]
    mem_taken: dict[int, int] = field(default_factory=dict)
    dev: DeviceWork | None = None  # None on a node without devices


@dataclass(slots=True)
class _Slices:
    """Exclusive CPUs and memory handed out container by container."""

    exclusive: dict[str, frozenset[int]] = field(default_factory=dict)
    memory: dict[str, tuple[MemoryBlock, ...]] = field(default_factory=dict)
    reusable: set[int] = field(default_factory=set)
    devices: dict[str, tuple[DeviceAlloc, ...]] = field(default_factory=dict)
    init: dict[str, frozenset[int]] = field(default_factory=dict)  # ordinary init containers


class NodeModel:
    """One node's allocation state: reserved set, default set, per-pod assignments."""

    def __init__(self, topo: CPUTopology, config: ModelConfig | None = None,
                 devices: NodeDevices | None = None) -> None:
        self.topo = topo
        self.config = config or ModelConfig()
        # Device-plugin devices (docs/design.md#devices-in-the-model): what is free, and
        # what each pod holds.
        self.devices = devices or NodeDevices()
        self.dev_free: dict[str, set[str]] = self.devices.free()
        self._dev_held: dict[tuple[str, str], dict[str, set[str]]] = {}
        self.reserved: frozenset[int] = self._reserve()
        online = topo.online
        # CPUs that may be handed out exclusively: default set − reserved.
        self.free: set[int] = set(online - self.reserved) if self.config.static else set()
        self.memory_enabled = (self.config.memory_policy == "Static" and bool(topo.memory))
        self.mem_free: dict[int, int] = {n: topo.memory_of(n) for n in topo.numa_nodes}
        self.pods: dict[tuple[str, str], PodPlacement] = {}
        self._mem_held: dict[tuple[str, str], dict[int, int]] = {}
        # Each node-exclusive container's CPUs as admitted: what a shrink keeps.
        self._admitted: dict[tuple[str, str, str], frozenset[int]] = {}
        # A checkpoint's exclusive sets, by (pod UID, container name); see from_checkpoint.
        self.checkpointed: dict[tuple[str, str], frozenset[int]] = {}
        # CPUs a checkpoint puts neither in its default set nor in any container, or that a
        # kubelet restart leaks (docs/design.md#allocator).
        self._unaccounted: frozenset[int] = frozenset()
        # Pod-level blocks of refused pods, kept by pod UID in the state with no container.
        self.orphan_blocks: dict[str, frozenset[int]] = {}
        self._masks = MaskTable(topo.numa_nodes)
        self._numa_size = {n: len(cpus) for n, cpus in topo.numa_cpus.items()}
        self._numa_memory = {n: topo.memory_of(n) for n in topo.numa_nodes}
        self._widths: dict[tuple[str, int], int | None] = {}
        self._numas_of_socket = {s: topo.numa_set(cpus) for s, cpus in topo.socket_cpus.items()}
        self._mask_sockets: dict[frozenset[int], frozenset[int]] = {}
        self._sockets_of_numa = {n: frozenset(topo.by_id[c].socket for c in cpus)
                                 for n, cpus in topo.numa_cpus.items()}
        if "align-by-socket" in self.config.options \
                and len(topo.socket_cpus) > len(topo.numa_cpus):
            raise ModelError("align-by-socket is not compatible with hardware where number of "
                             "sockets are more than number of NUMA nodes")
        # full-pcpus-only never hands out a thread whose sibling is reserved.
        self._reserved_cores = frozenset().union(
            *(topo.core_cpus[topo.by_id[c].core] for c in self.reserved))
        # Read-only hook for ``explain`` (docs/explain.md): told every merge the topology
        # manager makes, with each provider's hints and the mask chosen (or the refusal).
        self.on_hint: Callable[[HintRecord], None] | None = None

    def _reserve(self) -> frozenset[int]:
        online = self.topo.online
        if self.config.reserved_cpus:
            unknown = self.config.reserved_cpus - online
            if unknown:
                raise ModelError(f"reserved CPUs {format_cpuset(unknown)} are not online")
            wanted = math.ceil(self.config.reserved_cpu_m / 1000)
            if wanted and wanted != len(self.config.reserved_cpus):
                # NewStaticPolicy's own check, with its words.
                raise ModelError("[cpumanager] unable to reserve the required amount of CPUs "
                                 f"(size of {format_cpuset(self.config.reserved_cpus)} did "
                                 f"not equal {wanted})")
            return frozenset(self.config.reserved_cpus)
        if self.config.reserved_cpu_m > 0:
            n = math.ceil(self.config.reserved_cpu_m / 1000)
            got = policy_taker(self.topo, self.config.options,
                                 self.config.kubelet_version)(self.topo, online, n)
            if got is None:
                raise ModelError(f"cannot reserve {n} CPUs on a {len(online)}-CPU node")
            return got
        return frozenset()

    def seed(self, free: Iterable[int], mem_free: Mapping[int, int]) -> None:
        """Start from a node already in use: only ``free`` (less the reserved CPUs) may be
        handed out, and ``mem_free`` bytes are left per NUMA node. Pods placed before the
        seed are not known to the model, so nothing of theirs can be released."""
        self.free = (set(free) & set(self.topo.online)) - self.reserved \
            if self.config.static else set()
        self.mem_free = {n: max(0, mem_free.get(n, 0)) for n in self.topo.numa_nodes}

    @classmethod
    def from_checkpoint(cls, topo: CPUTopology,
                        assignments: Mapping[str, Mapping[str, Iterable[int]]],
                        default: Iterable[int], config: ModelConfig | None = None
                        ) -> NodeModel:
        """A static-policy node in the state the kubelet's checkpoint states: exclusive CPUs
        per pod UID and container, and the default set. Only the default set, less the
        reserved CPUs, can be handed out; CPUs in neither stay out of the default set, as
        the kubelet keeps them. Raises :class:`ModelError` for CPUs that are not online or
        are held twice (docs/design.md#checkpoints)."""
        model = cls(topo, config)
        shared = frozenset(default)
        seen = set(shared)
        for uid, containers in assignments.items():
            for name, cpus in containers.items():
                held = frozenset(cpus)
                if held & seen:
                    raise ModelError(f"pod {uid} container {name}: CPUs "
                                     f"{format_cpuset(held & seen)} are held twice")
                seen |= held
                model.checkpointed[(uid, name)] = held
        if not seen <= topo.online:
            raise ModelError(f"CPUs {format_cpuset(seen - topo.online)} are not online")
        if model.config.static:
            model.free = set(shared - model.reserved)
        model._unaccounted = topo.online - seen
        return model

    def remove_container(self, pod_uid: str, container: str) -> frozenset[int]:
        """The static policy's ``RemoveContainer`` for a checkpointed container: its CPUs
        return to the default set. Returns them (empty for a container the state lacks)."""
        freed = self.checkpointed.pop((pod_uid, container), frozenset())
        self.free |= freed - self.reserved
        return freed

    # ---- views -------------------------------------------------------------------------

    @property
    def allocatable(self) -> frozenset[int]:
        """What ``GetAllocatableResources`` reports: empty under the ``none`` policy."""
        if not self.config.static:
            return frozenset()
        return self.topo.online - self.reserved

    @property
    def default_set(self) -> frozenset[int]:
        """The shared pool the kubelet runs non-exclusive containers on."""
        held: set[int] = set(self._unaccounted).union(*self.checkpointed.values(),
                                                      *self.orphan_blocks.values())
        for p in self.pods.values():
            held |= p.held
        base = self.topo.online
        if "strict-cpu-reservation" in self.config.options:
            base = base - self.reserved
        return base - held

    def pools(self, numa: int | None = None) -> dict[str, int]:
        """Ground-truth CPU pools (docs/design.md#cpu-pools), optionally for one NUMA node.
        CPUs held by finished init containers are in no listed container: the ledger counts
        them as node shared."""
        scope = self.topo.online if numa is None else self.topo.numa_cpus[numa]
        owned: dict[int, str] = dict.fromkeys(
            frozenset().union(*self.checkpointed.values()), "node_exclusive")
        for p in self.pods.values():
            for c in p.containers:
                for cpu in c.exclusive:
                    owned.setdefault(cpu, c.assignment)
            rest = "pod_shared" if p.has_pod_shared else "pod_idle"
            for cpu in p.shared_pool:
                owned.setdefault(cpu, rest)
        counts: dict[str, int] = dict.fromkeys(POOLS, 0)
        for cpu in scope:
            if cpu in owned:
                counts[owned[cpu]] += 1
            elif cpu in self.reserved:
                counts["reserved"] += 1
            else:
                counts["node_shared"] += 1
        return counts

    # ---- hints ---------------------------------------------------------------------------

    def cpu_hints(self, n: int, available: Iterable[int],
                  reusable: frozenset[int] = frozenset()) -> list[Hint]:
        """The CPU manager's hints for ``n`` CPUs out of ``available``, every mask holding
        the ``reusable`` CPUs' NUMA nodes. A mask's width is judged by all its CPUs, reserved
        ones included, as the kubelet does."""
        return self._cpu_hints(n, available, self._masks.every, reusable)

    def held_cpu_hints(self, n: int, held: frozenset[int]) -> list[Hint]:
        """Hints for a container already in the state (after a kubelet restart, or admitted
        again): regenerated from the CPUs it holds, nothing else; none at all when it holds
        another number than it asks for (``getTopologyHintsForAdd``)."""
        return self.cpu_hints(n, held) if len(held) == n else []

    def held_pod_cpu_hints(self, requested: int,
                           containers: Iterable[tuple[int, frozenset[int] | None]]
                           ) -> tuple[list[Hint] | None, frozenset[int]]:
        """Pod scope: ``containers`` are (CPUs each asks, CPUs it holds or ``None``). When
        one holds another number than it asks, no hint (``[]``); when those held add up to
        the pod's request, hints regenerated from them; else ``None`` and the held CPUs,
        which the kubelet then offers again beside the free ones
        (``getPodTopologyHintsForAdd``)."""
        assigned: set[int] = set()
        for wants, held in containers:
            if held is None:
                continue
            if len(held) != wants:
                return [], frozenset()
            assigned |= held
        if len(assigned) == requested:
            return self.cpu_hints(requested, assigned), frozenset(assigned)
        return None, frozenset(assigned)

    def _cpu_hints(self, n: int, available: Iterable[int], candidates: list[int],
                   reusable: frozenset[int] = frozenset()) -> list[Hint]:
        pool = available if isinstance(available, (set, frozenset)) else set(available)
        free = {node: len(cpus & pool) for node, cpus in self.topo.numa_cpus.items()}
        narrowest = self._narrowest("cpu", n)
        hints = self._masks.hints(candidates, n, free, narrowest)
        if reusable:
            # generateCPUTopologyHints drops every mask missing a node of a reusable CPU.
            nodes = self.topo.numa_set(reusable)
            hints = [h for h in hints if nodes <= h[0]]
        if "align-by-socket" not in self.config.options or narrowest is None:
            return hints
        # align-by-socket also prefers a mask on as few sockets as the narrowest needs.
        per_socket = len(self.topo.numa_cpus) // len(self.topo.socket_cpus)
        min_sockets = -(-narrowest // per_socket)
        return [(m, preferred or len(self._sockets_of(m)) == min_sockets)
                for m, preferred in hints]

    def _sockets_of(self, mask: frozenset[int]) -> frozenset[int]:
        got = self._mask_sockets.get(mask)
        if got is None:
            got = self._mask_sockets[mask] = frozenset().union(
                *(self._sockets_of_numa[n] for n in mask))
        return got

    def _narrowest(self, resource: str, need: int) -> int | None:
        key = (resource, need)
        if key not in self._widths:
            total = self._numa_size if resource == "cpu" else self._numa_memory
            self._widths[key] = self._masks.narrowest(need, total)
        return self._widths[key]

    def _hint(self, cpus: int, cpu_pool: Iterable[int], memory: int, mem_free: Mapping[int, int],
              what: str = "pod", devices: Mapping[str, list[Hint] | None] | None = None,
              reusable: frozenset[int] = frozenset()) -> frozenset[int] | None:
        """The topology manager's merged NUMA affinity for one request; ``devices`` are the
        device manager's hints per resource asked (it is the first provider); ``reusable``
        the CPUs the container may take back from init containers."""
        policy = self.config.topology_policy
        if policy == "none":
            return None
        if devices:
            return self._device_hint(cpus, cpu_pool, memory, mem_free, what, devices,
                                     reusable)
        providers: list[list[Hint]] = []
        # Under single-numa-node only single-node masks can win the merge.
        candidates = self._masks.single if policy == "single-numa-node" else self._masks.every
        if cpus > 0:
            providers.append(self._cpu_hints(cpus, cpu_pool, candidates, reusable))
        if memory > 0 and self.memory_enabled:
            providers.append(self._masks.hints(candidates, memory, mem_free,
                                               self._narrowest("memory", memory)))
        try:
            chosen = merge(policy, providers, frozenset(self.topo.numa_nodes))
        except HintError as exc:
            if self.on_hint is not None:
                self.on_hint(HintRecord(what, cpus, memory, tuple(providers), None, str(exc)))
            raise _Refused(str(exc)) from None
        if self.on_hint is not None:
            self.on_hint(HintRecord(what, cpus, memory, tuple(providers), chosen, None))
        return chosen

    def _device_hint(self, cpus: int, cpu_pool: Iterable[int], memory: int,
                     mem_free: Mapping[int, int], what: str,
                     devices: Mapping[str, list[Hint] | None],
                     reusable: frozenset[int] = frozenset()) -> frozenset[int] | None:
        """With devices asked, the topology manager's own merge (``kubelet_merge``): device
        hints are not every mask with room, so the shortcut of ``merge`` does not hold."""
        every = self._masks.every
        others: list[list[Hint]] = []
        if cpus > 0:
            others.append(self._cpu_hints(cpus, cpu_pool, every, reusable))
        if memory > 0 and self.memory_enabled:
            others.append(self._masks.hints(every, memory, mem_free,
                                            self._narrowest("memory", memory)))
        shown = tuple(devices.items())
        try:
            chosen = kubelet_merge(self.config.topology_policy, [*devices.values(), *others],
                                   frozenset(self.topo.numa_nodes))
        except HintError as exc:
            if self.on_hint is not None:
                self.on_hint(HintRecord(what, cpus, memory, tuple(others), None, str(exc),
                                        _shown(shown)))
            raise _Refused(str(exc)) from None
        if self.on_hint is not None:
            self.on_hint(HintRecord(what, cpus, memory, tuple(others), chosen, None,
                                    _shown(shown)))
        return chosen

    def _shared_devices(self, pod: PodSpec, work: _Work, placement: PodPlacement
                        ) -> PodPlacement:
        """Devices for a pod given no exclusive CPUs: the device manager allocates them
        all the same, aligned by its own hints alone."""
        assert work.dev is not None
        slices = _Slices()
        hint = None
        if self.config.scope == "pod":
            hint = self._hint(0, (), 0, {}, devices=work.dev.pod_hints(pod))
        for c, ordinary_init in _in_start_order(pod):
            dev_hints = work.dev.container_hints(c)
            if self.config.scope == "container" and dev_hints:
                what = f"container {c.name}"
                try:
                    hint = self._hint(0, (), 0, {}, what, dev_hints)
                except _Refused as exc:
                    raise _Refused(f"{what}: {exc}") from None
            self._take_devices(work, c, hint, ordinary_init, slices)
        return _with_devices(placement, slices.devices)

    def _take_devices(self, work: _Work, c: ContainerSpec, hint: frozenset[int] | None,
                      ordinary_init: bool, slices: _Slices) -> None:
        if work.dev is None:
            return
        try:
            got = work.dev.take(c, hint, ordinary_init)
        except DevicesUnavailable as exc:
            raise _Refused(str(exc)) from None
        if not ordinary_init:
            slices.devices[c.name] = got

    # ---- taking CPUs and memory -----------------------------------------------------------

    def allocate_cpus(self, n: int, numa_hint: frozenset[int] | None,
                      pool: Iterable[int] | None = None) -> frozenset[int]:
        """The static policy's ``allocateCPUs``: ``n`` CPUs out of ``pool`` (the free CPUs
        by default), the hinted NUMA nodes first. Raises :class:`ModelError` with the
        kubelet's reason when it cannot."""
        try:
            return self._take(self.free if pool is None else pool, n, numa_hint, "request",
                              default=self.free)
        except _Refused as exc:
            raise ModelError(str(exc)) from None

    def _check_smt(self, default: frozenset[int], n: int, what: str) -> None:
        """``enforceSMTAlignment``: it counts the default set less the reserved cores, not
        the pool the take chooses from, and holds without SMT too (a core of one CPU)."""
        tpc = self.topo.threads_per_core
        if "full-pcpus-only" not in self.config.options:
            return
        if n % tpc:
            raise _Refused(f"{what}: {smt_alignment_error(n, tpc)}")
        physical = len(default - self._reserved_cores)
        if n > physical:
            raise _Refused(f"{what}: {smt_alignment_error(n, tpc, physical)}")

    def _take(self, pool: Iterable[int], n: int, hint: frozenset[int] | None,
              what: str, *, smt: bool = True, default: Iterable[int] | None = None
              ) -> frozenset[int]:
        """``default``: the free CPUs full-pcpus-only counts (the pool when not given);
        ``smt=False`` where the kubelet does not check (the slices of a pod-level block)."""
        pool = frozenset(pool)
        if smt:
            self._check_smt(pool if default is None else frozenset(default), n, what)
        if n > len(pool):
            raise _Refused(f"{what}: {not_enough_cpus(n, len(pool))}")
        taker = policy_taker(self.topo, self.config.options, self.config.kubelet_version)
        if hint is not None and "align-by-socket" in self.config.options:
            # The hinted NUMA nodes widen to their whole sockets.
            hint = frozenset().union(*(self._numas_of_socket[s] for s in self._sockets_of(hint)))
        got = take_with_hint(self.topo, pool, n, hint, taker)
        if got is None:
            raise _Refused(f"{what}: {not_enough_cpus(n, len(pool))}")
        return got

    def _take_memory(self, work: _Work, size: int, hint: frozenset[int] | None,
                     cpus: frozenset[int], what: str) -> tuple[MemoryBlock, ...]:
        if size <= 0 or not self.memory_enabled:
            return ()
        nodes = sorted(hint) if hint else sorted(self.topo.numa_set(cpus))
        if not nodes:
            nodes = list(self.topo.numa_nodes)
        if sum(work.mem_free.get(n, 0) for n in nodes) < size:
            raise _Refused(f"insufficient memory: {what} needs {size} bytes on NUMA node(s) "
                           f"{','.join(map(str, nodes))}")
        left = size
        for n in nodes:
            part = min(left, work.mem_free[n])
            work.mem_free[n] -= part
            work.mem_taken[n] = work.mem_taken.get(n, 0) + part
            left -= part
        return (MemoryBlock("memory", size, tuple(nodes)),)

    # ---- admission ------------------------------------------------------------------------

    def admit(self, pod: PodSpec) -> PodPlacement | Rejection:
        """Place ``pod`` as the kubelet would, or say why it would reject it."""
        placed = self.pods.get((pod.namespace, pod.name))
        if placed is not None:
            # Admitting the same pod again changes nothing, as the kubelet skips containers
            # already in its state; another pod under the name is refused.
            if placed.spec == pod:
                return placed
            return Rejection(pod.namespace, pod.name, "a pod with this name is already placed")
        result = self.plan(pod)
        if isinstance(result, Rejection):
            if result.leaked:
                self.free -= result.leaked
                self.orphan_blocks[pod.uid] = result.leaked
            return result
        placement, work = result
        self.free = work.free
        self.mem_free = work.mem_free
        self.pods[placement.key] = placement
        self._mem_held[placement.key] = work.mem_taken
        if work.dev is not None:
            self.dev_free = work.dev.free
            self._dev_held[placement.key] = work.dev.taken
        for c in placement.containers:
            if c.assignment == "node_exclusive":
                self._admitted[(*placement.key, c.name)] = c.exclusive
        return placement

    def plan(self, pod: PodSpec) -> tuple[PodPlacement, _Work] | Rejection:
        """Work out a placement without changing the state."""
        work = _Work(free=set(self.free), mem_free=dict(self.mem_free))
        if self.devices:
            work.dev = DeviceWork(self.devices, self.dev_free, self.topo.numa_nodes)
        try:
            placement = self._place(pod, work)
            if work.dev is not None and placement.path == "none":
                placement = self._shared_devices(pod, work, placement)
            return placement, work
        except _Leaked as exc:
            return Rejection(pod.namespace, pod.name, str(exc), exc.block)
        except _Refused as exc:
            return Rejection(pod.namespace, pod.name, str(exc))

    def _place(self, pod: PodSpec, work: _Work) -> PodPlacement:
        cfg = self.config
        if not cfg.static:
            return _all_shared(pod, "the CPU manager policy is none")
        pod_level = pod.resources is not None and pod.resources.is_set
        if not pod_level:
            return self._legacy(pod, work)
        if not cfg.pod_level:
            # The CPU and memory managers skip such a pod rather than pin its containers
            # (docs/design.md#allocator).
            return _all_shared(pod, "pod-level resources without PodLevelResourceManagers: "
                                    "no exclusive CPUs or memory")
        if not pod.guaranteed:
            return _all_shared(pod, "not Guaranteed: no exclusive CPUs")
        if cfg.scope == "container" or cfg.topology_policy == "none":
            # Only the pod scope's admission allocates a pod block; the container scope and
            # the none policy's admission pin each eligible container from the node pool,
            # unbounded by the budget (docs/design.md#allocator).
            placement = self._legacy(pod, work)
            return PodPlacement(placement.namespace, placement.name, placement.uid, pod,
                                "container", frozenset(), (), placement.containers,
                                placement.numa_hint, placement.note, placement.init_held,
                                placement.init_slices)
        budget = pod.budget_cpus
        if budget is None:
            return _all_shared(pod, "fractional pod budget: no exclusive CPUs")
        _validate_pod_scope(pod)
        return self._pod_scope(pod, budget, work)

    def _legacy(self, pod: PodSpec, work: _Work) -> PodPlacement:
        """Per-container exclusive CPUs from the node pool; init-container CPUs are reused,
        and those no later container reused stay held by the pod."""
        hint: frozenset[int] | None = None
        if self.config.scope == "pod":
            hint = self._hint(pod_guaranteed_cpus(pod), work.free, _pod_memory(pod),
                              work.mem_free,
                              devices=work.dev.pod_hints(pod) if work.dev else None)
        slices = _Slices()
        for c, ordinary_init in _in_start_order(pod):
            hint = self._legacy_container(pod, c, ordinary_init, hint, work, slices)
        containers = []
        for c in pod.long_running:
            ex = slices.exclusive.get(c.name, frozenset())
            blocks = slices.memory.get(c.name, ())
            containers.append(ContainerTruth(
                c.name, c.sidecar, bool(ex), "node_exclusive" if ex else "node_shared",
                "node_exclusive" if blocks else "node_shared", ex, ex, blocks))
        note = "" if any(c.exclusive for c in containers) else \
            ("not Guaranteed: no exclusive CPUs" if not pod.guaranteed
             else "no container asks for whole CPUs")
        return _with_devices(PodPlacement(
            pod.namespace, pod.name, pod.uid, pod, "legacy", frozenset(), (),
            tuple(containers), hint, note, frozenset(slices.reusable),
            tuple(slices.init.items())), slices.devices)

    def _legacy_container(self, pod: PodSpec, c: ContainerSpec, ordinary_init: bool,
                          hint: frozenset[int] | None, work: _Work, slices: _Slices
                          ) -> frozenset[int] | None:
        eligible = _eligible_init(pod, c) if ordinary_init else pod.eligible(c)
        n = _container_cpus(pod, c) if eligible else 0
        # Init containers' memory is transient and reused: the model does not hold it.
        mem = _mem_limit(c) if pod.guaranteed and not ordinary_init else 0
        what = f"container {c.name}"
        dev_hints = work.dev.container_hints(c) if work.dev else None
        if self.config.scope == "container" and (n or (mem and self.memory_enabled)
                                                 or dev_hints):
            try:
                hint = self._hint(n, work.free | slices.reusable, mem, work.mem_free, what,
                                  dev_hints, frozenset(slices.reusable) if n else frozenset())
            except _Refused as exc:
                raise _Refused(f"{what}: {exc}") from None
        # The device manager is the topology manager's first provider: it allocates first.
        self._take_devices(work, c, hint, ordinary_init, slices)
        got = self._take(work.free | slices.reusable, n, hint, what,
                         default=work.free) if n else frozenset()
        slices.reusable -= got
        work.free -= got
        blocks = self._take_memory(work, mem, hint, got, what) if mem else ()
        if ordinary_init:
            slices.reusable |= got
            if got:
                slices.init[c.name] = got
        else:
            slices.exclusive[c.name] = got
            slices.memory[c.name] = blocks
        return hint

    def _pod_scope(self, pod: PodSpec, budget: int, work: _Work,
                   hint: frozenset[int] | _Auto | None = _AUTO) -> PodPlacement:
        """One NUMA-aligned block of the budget; slices carved from it
        (docs/design.md#allocator). ``hint`` is the topology manager's, when already known."""
        pod_mem = (pod.resources.memory_limit if pod.resources else None) or 0
        slice_mem = {c.name: _mem_limit(c) for c in pod.long_running if pod.eligible(c)}
        if self.memory_enabled and pod_mem and sum(slice_mem.values()) > pod_mem:
            raise _Refused("memory over budget: exclusive containers' memory exceeds the "
                           "pod memory budget")
        if isinstance(hint, _Auto):
            hint = self._hint(budget, work.free, pod_mem, work.mem_free,
                              devices=work.dev.pod_hints(pod) if work.dev else None)
        slices = _Slices()
        for c, ordinary_init in _in_start_order(pod):
            self._take_devices(work, c, hint, ordinary_init, slices)
        block = self._take(work.free, budget, hint, "pod budget")
        work.free -= block
        block_memory = self._take_memory(work, pod_mem, hint, block, "pod budget")
        init_slices: dict[str, frozenset[int]] = {}
        try:
            exclusive = self._carve_slices(pod, block, init_slices)
        except _Refused as exc:
            raise _Leaked(str(exc), block) from None
        shared_pool = block.difference(*exclusive.values())
        mem_nodes = block_memory[0].numa_nodes if block_memory else ()
        containers = []
        for c in pod.long_running:
            ex = exclusive.get(c.name, frozenset())
            if not ex:
                containers.append(ContainerTruth(
                    c.name, c.sidecar, False, "pod_shared",
                    "pod_shared" if block_memory else "node_shared", frozenset(),
                    shared_pool, ()))
                continue
            blocks = (MemoryBlock("memory", slice_mem[c.name], mem_nodes),) \
                if block_memory and slice_mem[c.name] else ()
            mem_assign: Assignment = "node_shared"
            if block_memory:
                mem_assign = "pod_exclusive" if blocks else "pod_shared"
            containers.append(ContainerTruth(
                c.name, c.sidecar, True, "pod_exclusive", mem_assign, ex, ex, blocks))
        return _with_devices(PodPlacement(pod.namespace, pod.name, pod.uid, pod, "pod", block,
                                          block_memory, tuple(containers), hint,
                                          init_slices=tuple(init_slices.items())),
                             slices.devices)

    def _carve_slices(self, pod: PodSpec, block: frozenset[int],
                      init_slices: dict[str, frozenset[int]]) -> dict[str, frozenset[int]]:
        """Exclusive slices out of the pod's block, in start order; ordinary init containers'
        CPUs (recorded in ``init_slices``) are reused by the containers after them and fall
        back to the block."""
        inside = set(block)
        reusable: set[int] = set()
        exclusive: dict[str, frozenset[int]] = {}
        for c, ordinary_init in _in_start_order(pod):
            eligible = _eligible_init(pod, c) if ordinary_init else pod.eligible(c)
            n = _container_cpus(pod, c) if eligible else 0
            if not n:
                continue
            # AllocatePod holds the block to full-pcpus-only, not the slices carved from it.
            got = self._take(inside | reusable, n, None, f"container {c.name}", smt=False)
            inside -= got
            reusable -= got
            if ordinary_init:
                reusable |= got
                init_slices[c.name] = got
            else:
                exclusive[c.name] = got
        return exclusive

    # ---- release --------------------------------------------------------------------------

    def release(self, namespace: str, name: str) -> PodPlacement | None:
        """Remove a pod: its whole block (or its exclusive sets) and memory go back."""
        placement = self.pods.pop((namespace, name), None)
        if placement is None:
            return None
        for c in placement.containers:
            self._admitted.pop((namespace, name, c.name), None)
        self.free |= placement.held
        for node, size in self._mem_held.pop((namespace, name), {}).items():
            self.mem_free[node] += size
        for resource, ids in self._dev_held.pop((namespace, name), {}).items():
            self.dev_free.setdefault(resource, set()).update(ids)
        return placement

    def resize(self, namespace: str, name: str, container: str, cpus: int
               ) -> PodPlacement | Rejection:
        """An in-place resize of a node-exclusive container to ``cpus`` exclusive CPUs, as
        the kubelet does it: it keeps what it holds and grows from the free CPUs, or shrinks
        within its own CPUs keeping those it was admitted with."""
        placement = self.pods.get((namespace, name))
        truth = next((c for c in placement.containers if c.name == container), None) \
            if placement else None
        if placement is None or truth is None:
            return Rejection(namespace, name, f"no placed container {container}")
        try:
            grown = self._resized(placement, truth, cpus)
        except _Refused as exc:
            return Rejection(namespace, name, str(exc))
        self.free -= grown - truth.exclusive
        self.free |= truth.exclusive - grown
        resized = ContainerTruth(truth.name, truth.sidecar, truth.eligible, truth.assignment,
                                 truth.memory_assignment, grown, grown, truth.memory)
        self.pods[placement.key] = replace(placement, containers=tuple(
            resized if c.name == container else c for c in placement.containers))
        return self.pods[placement.key]

    def _resized(self, placement: PodPlacement, truth: ContainerTruth, cpus: int
                 ) -> frozenset[int]:
        if truth.assignment != "node_exclusive":
            raise _Refused(f"container {truth.name} holds no node-exclusive CPUs to resize")
        current = truth.exclusive
        baseline = self._admitted.get((*placement.key, truth.name), current)
        if cpus < len(baseline):
            raise _Refused(f"requested number of CPUs ( {cpus} ) are less than number of "
                           f"retained CPUs ( {len(baseline)} )")
        pool = frozenset(self.free) if cpus > len(current) else current
        self._check_smt(pool | current, cpus, f"container {truth.name}")
        opts = self.config.options
        if "distribute-cpus-across-numa" in opts:
            group = self.topo.threads_per_core if "full-pcpus-only" in opts else 1
            got = take_distributed_for_resize(self.topo, pool, cpus, current, baseline, group,
                                              align_by_socket="align-by-socket" in opts)
        else:
            got = take_for_resize(self.topo, pool, cpus, current, baseline,
                                  spread="distribute-cpus-across-cores" in opts,
                                  uncore="prefer-align-cpus-by-uncorecache" in opts)
        if got is None:
            raise _Refused(f"container {truth.name}: "
                           f"{not_enough_cpus(cpus, len(pool | current))}")
        return got

    def remove_init_containers(self, namespace: str, name: str) -> frozenset[int]:
        """The kubelet removing a pod's finished init containers: the CPUs they still held
        go back to the shared pool. Returns those CPUs."""
        placement = self.pods.get((namespace, name))
        if placement is None or not placement.init_held:
            return frozenset()
        freed = placement.init_held
        self.pods[placement.key] = replace(placement, init_held=frozenset())
        self.free |= freed
        return freed


def _shown(devices: tuple[tuple[str, list[Hint] | None], ...]
           ) -> tuple[tuple[str, list[Hint]], ...]:
    return tuple((name, hints or []) for name, hints in devices)


def _with_devices(p: PodPlacement, devices: Mapping[str, tuple[DeviceAlloc, ...]]
                  ) -> PodPlacement:
    if not any(devices.values()):
        return p
    return replace(p, containers=tuple(replace(c, devices=devices.get(c.name, ()))
                                       for c in p.containers))


def _all_shared(pod: PodSpec, note: str) -> PodPlacement:
    containers = tuple(
        ContainerTruth(c.name, c.sidecar, False, "node_shared", "node_shared",
                       frozenset(), frozenset())
        for c in pod.long_running)
    return PodPlacement(pod.namespace, pod.name, pod.uid, pod, "none", frozenset(), (),
                        containers, None, note)


def _eligible_init(pod: PodSpec, c: ContainerSpec) -> bool:
    """An ordinary init container gets (reusable) exclusive CPUs under the same rule."""
    if not pod.guaranteed:
        return False
    r = c.resources
    return r.guaranteed and r.integer_cpus is not None
