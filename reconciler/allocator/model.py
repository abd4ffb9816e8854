"""The kubelet's static CPU policy, topology manager and Static memory manager, as a model.

Three paths (SPEC §2.2):

* legacy per-container allocation: every eligible container gets exclusive CPUs from the
  node pool (pods without a pod budget, or kubelets without pod-level resource managers);
* pod scope with a pod budget: one NUMA-aligned block of the budget's size, sidecar slices,
  init-container reuse, app slices, and the pod shared pool;
* container scope with a pod budget: eligible containers get exclusive CPUs from the node
  pool, the rest run on the node shared pool, within the budget.

``NodeModel.admit`` either places a pod and records its :class:`PodPlacement` (the ground
truth: every container's assignment and cpuset) or returns a :class:`Rejection` with the
kubelet's reason, leaving the state untouched. ``release`` returns every CPU and byte.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from reconciler.allocator.take import take_by_topology, take_distributed, take_with_hint
from reconciler.allocator.topology import CPUTopology
from reconciler.cpuset import format_cpuset
from reconciler.kube import ContainerSpec, KubeletConfig, PodSpec
from reconciler.pools import CPU_POOLS, Assignment
from reconciler.snapshot import MemoryBlock

TOPOLOGY_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
SCOPES = ("container", "pod")
CPU_OPTIONS = ("full-pcpus-only", "distribute-cpus-across-numa", "strict-cpu-reservation")
MAX_HINT_NUMA_NODES = 8  # the topology manager's own default limit


class ModelError(ValueError):
    """A model configuration that the kubelet would refuse to start with."""


@dataclass(frozen=True, slots=True)
class ModelConfig:
    cpu_policy: str = "static"  # "static" | "none"
    memory_policy: str = "Static"  # "Static" | "None"
    topology_policy: str = "none"
    scope: str = "container"
    options: frozenset[str] = frozenset()
    reserved_cpus: frozenset[int] | None = None  # reservedSystemCPUs
    reserved_cpu_m: int = 0  # kubeReserved.cpu + systemReserved.cpu, when no explicit set
    pod_level: bool = True  # PodLevelResourceManagers (and PodLevelResources) on

    def __post_init__(self) -> None:
        if self.cpu_policy not in ("static", "none"):
            raise ModelError(f"unknown CPU manager policy {self.cpu_policy!r}")
        if self.memory_policy not in ("Static", "None"):
            raise ModelError(f"unknown memory manager policy {self.memory_policy!r}")
        if self.topology_policy not in TOPOLOGY_POLICIES:
            raise ModelError(f"unknown topology manager policy {self.topology_policy!r} "
                             f"(one of {', '.join(TOPOLOGY_POLICIES)})")
        if self.scope not in SCOPES:
            raise ModelError(f"unknown topology manager scope {self.scope!r} (pod|container)")
        unknown = sorted(self.options - set(CPU_OPTIONS))
        if unknown:
            raise ModelError(f"unknown CPU manager policy option(s) {', '.join(unknown)}")

    @property
    def static(self) -> bool:
        return self.cpu_policy == "static"

    @classmethod
    def from_kubelet_config(cls, cfg: KubeletConfig) -> ModelConfig:
        options = frozenset(k for k, v in cfg.cpu_manager_policy_options
                            if v.strip().lower() == "true")
        return cls(
            cpu_policy=cfg.cpu_manager_policy.lower(),
            memory_policy="Static" if cfg.memory_manager_policy.lower() == "static" else "None",
            topology_policy=cfg.topology_manager_policy.lower(),
            scope=cfg.topology_manager_scope.lower(),
            options=options & frozenset(CPU_OPTIONS),
            reserved_cpus=cfg.reserved_system_cpus,
            reserved_cpu_m=cfg.reserved_cpu_quantity_m(),
            pod_level=cfg.pod_level_resource_managers,
        )

    def to_configz(self) -> dict[str, object]:
        """The ``/configz`` body a kubelet with this configuration serves."""
        cfg: dict[str, object] = {
            "cpuManagerPolicy": self.cpu_policy,
            "cpuManagerPolicyOptions": {o: "true" for o in sorted(self.options)},
            "memoryManagerPolicy": self.memory_policy,
            "topologyManagerPolicy": self.topology_policy,
            "topologyManagerScope": self.scope,
            "featureGates": {"PodLevelResources": True,
                             "PodLevelResourceManagers": self.pod_level},
        }
        if self.reserved_cpus:
            cfg["reservedSystemCPUs"] = format_cpuset(self.reserved_cpus)
        elif self.reserved_cpu_m:
            cfg["kubeReserved"] = {"cpu": f"{self.reserved_cpu_m}m"}
        return {"kubeletconfig": cfg}


@dataclass(frozen=True, slots=True)
class ContainerTruth:
    """One long-running container as the model placed it (ledger semantics, SPEC §4.3)."""

    name: str
    sidecar: bool
    eligible: bool
    assignment: Assignment
    memory_assignment: Assignment
    exclusive: frozenset[int]  # its own exclusive CPUs (empty when shared)
    cpus: frozenset[int]  # exclusive set; the pod shared pool for pod_shared; else empty
    memory: tuple[MemoryBlock, ...] = ()  # its own exclusive memory blocks


@dataclass(frozen=True, slots=True)
class PodPlacement:
    namespace: str
    name: str
    uid: str
    spec: PodSpec
    path: Literal["none", "legacy", "pod", "container"]
    block: frozenset[int]  # the pod-level block (pod scope with a budget), else empty
    block_memory: tuple[MemoryBlock, ...]
    containers: tuple[ContainerTruth, ...]  # List order: sidecars, then app containers
    numa_hint: frozenset[int] | None
    note: str = ""  # why a pod got no exclusive CPUs, when it matters

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def exclusive(self) -> frozenset[int]:
        out: set[int] = set()
        for c in self.containers:
            out |= c.exclusive
        return frozenset(out)

    @property
    def shared_pool(self) -> frozenset[int]:
        return self.block - self.exclusive

    @property
    def has_pod_shared(self) -> bool:
        return any(c.assignment == "pod_shared" for c in self.containers)

    @property
    def held(self) -> frozenset[int]:
        """Every CPU the pod holds (its block, or its exclusive sets)."""
        return self.block | self.exclusive

    def numa_nodes(self, topo: CPUTopology) -> frozenset[int]:
        return topo.numa_set(self.held)


@dataclass(frozen=True, slots=True)
class Rejection:
    namespace: str
    name: str
    reason: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


def _mem_limit(c: ContainerSpec) -> int:
    r = c.resources
    return r.memory_limit if r.memory_limit is not None else (r.memory_request or 0)


@dataclass(slots=True)
class _Work:
    """A tentative change to the node state, applied only when a pod is admitted."""

    free: set[int]
    mem_free: dict[int, int]
    mem_taken: dict[int, int] = field(default_factory=dict)


class NodeModel:
    """One node's allocation state: reserved set, default set, per-pod assignments."""

    def __init__(self, topo: CPUTopology, config: ModelConfig | None = None) -> None:
        self.topo = topo
        self.config = config or ModelConfig()
        online = topo.online
        if self.config.reserved_cpus:
            unknown = self.config.reserved_cpus - online
            if unknown:
                raise ModelError(f"reserved CPUs {format_cpuset(unknown)} are not online")
            reserved = frozenset(self.config.reserved_cpus)
        elif self.config.reserved_cpu_m > 0:
            n = math.ceil(self.config.reserved_cpu_m / 1000)
            got = take_by_topology(topo, online, n)
            if got is None:
                raise ModelError(f"cannot reserve {n} CPUs on a {len(online)}-CPU node")
            reserved = got
        else:
            reserved = frozenset()
        self.reserved: frozenset[int] = reserved
        # CPUs that may be handed out exclusively: default set − reserved.
        self.free: set[int] = set(online - reserved) if self.config.static else set()
        self.memory_enabled = (self.config.memory_policy == "Static" and bool(topo.memory))
        self.mem_free: dict[int, int] = {n: topo.memory_of(n) for n in topo.numa_nodes}
        self.pods: dict[tuple[str, str], PodPlacement] = {}
        self._mem_held: dict[tuple[str, str], dict[int, int]] = {}
        self._masks = self._hint_masks()

    # ---- views -------------------------------------------------------------------------

    @property
    def allocatable(self) -> frozenset[int]:
        """What ``GetAllocatableResources`` reports: empty under the ``none`` policy."""
        if not self.config.static:
            return frozenset()
        return self.topo.online - self.reserved

    @property
    def default_set(self) -> frozenset[int]:
        exclusive: set[int] = set()
        for p in self.pods.values():
            exclusive |= p.held
        base = self.topo.online
        if "strict-cpu-reservation" in self.config.options:
            base = base - self.reserved
        return base - exclusive

    def pools(self, numa: int | None = None) -> dict[str, int]:
        """Ground-truth CPU pools (SPEC §3.1), optionally for one NUMA node."""
        scope = self.topo.online if numa is None else self.topo.numa_cpus[numa]
        owned: dict[int, str] = {}
        for p in self.pods.values():
            for c in p.containers:
                for cpu in c.exclusive:
                    owned.setdefault(cpu, c.assignment)
            rest = "pod_shared" if p.has_pod_shared else "pod_idle"
            for cpu in p.shared_pool:
                owned.setdefault(cpu, rest)
        counts: dict[str, int] = dict.fromkeys(CPU_POOLS, 0)
        for cpu in scope:
            if cpu in owned:
                counts[owned[cpu]] += 1
            elif cpu in self.reserved:
                counts["reserved"] += 1
            else:
                counts["node_shared"] += 1
        return counts

    # ---- hints ---------------------------------------------------------------------------

    def _hint_masks(self) -> list[frozenset[int]]:
        nodes = self.topo.numa_nodes
        if len(nodes) > MAX_HINT_NUMA_NODES:
            return [frozenset([n]) for n in nodes] + [frozenset(nodes)]
        masks = [frozenset(c) for k in range(1, len(nodes) + 1)
                 for c in itertools.combinations(nodes, k)]
        return masks

    def _provider_hints(self, need: int, free_by_node: Mapping[int, int],
                        total_by_node: Mapping[int, int]
                        ) -> list[tuple[frozenset[int], bool]]:
        min_size: int | None = None
        for mask in self._masks:
            if sum(total_by_node.get(n, 0) for n in mask) >= need \
                    and (min_size is None or len(mask) < min_size):
                min_size = len(mask)
        hints = []
        for mask in self._masks:
            if sum(free_by_node.get(n, 0) for n in mask) >= need:
                hints.append((mask, len(mask) == min_size))
        if self.config.topology_policy == "single-numa-node":
            hints = [h for h in hints if len(h[0]) == 1]
        return hints

    def _hint(self, cpus: int, cpu_pool: Iterable[int], memory: int, mem_free: Mapping[int, int]
              ) -> tuple[frozenset[int] | None, str]:
        """The topology manager's merged NUMA affinity for one request: (mask, error)."""
        policy = self.config.topology_policy
        if policy == "none":
            return None, ""
        providers: list[list[tuple[frozenset[int], bool]]] = []
        if cpus > 0:
            free_by_node: dict[int, int] = {}
            for cpu in cpu_pool:
                n = self.topo.numa_of(cpu)
                free_by_node[n] = free_by_node.get(n, 0) + 1
            total = {n: len(c - self.reserved) for n, c in self.topo.numa_cpus.items()}
            providers.append(self._provider_hints(cpus, free_by_node, total))
        if memory > 0 and self.memory_enabled:
            total_mem = {n: self.topo.memory_of(n) for n in self.topo.numa_nodes}
            providers.append(self._provider_hints(memory, mem_free, total_mem))
        if not providers:
            return None, ""
        # A merged hint is a mask every provider can satisfy; preferred when every provider
        # prefers it; the best is preferred first, then the narrowest, then the lowest nodes.
        everything = frozenset(self.topo.numa_nodes)
        tables = [dict(hints) for hints in providers]
        best: tuple[tuple[bool, int, tuple[int, ...]], frozenset[int], bool] | None = None
        for mask in tables[0]:
            if not all(mask in t for t in tables[1:]):
                continue
            preferred = all(t[mask] for t in tables)
            key = (not preferred, len(mask), tuple(sorted(mask)))
            if best is None or key < best[0]:
                best = (key, mask, preferred)
        if best is None:
            mask, preferred = everything, False
        else:
            mask, preferred = best[1], best[2]
        if policy == "restricted" and not preferred:
            return None, "topology affinity error: no NUMA placement meets the restricted policy"
        if policy == "single-numa-node" and (not preferred or len(mask) != 1):
            return None, ("topology affinity error: the request fits no single NUMA node "
                          "(single-numa-node)")
        return mask, ""

    # ---- taking CPUs and memory -----------------------------------------------------------

    def _take(self, pool: Iterable[int], n: int, hint: frozenset[int] | None,
              what: str) -> tuple[frozenset[int] | None, str]:
        pool = frozenset(pool)
        opts = self.config.options
        tpc = self.topo.threads_per_core
        if "full-pcpus-only" in opts and tpc > 1:
            if n % tpc:
                return None, (f"SMT alignment error: {what} requests {n} CPUs, not a multiple "
                              f"of {tpc} threads per core (full-pcpus-only)")
            whole = sum(len(cpus) for cpus in self.topo.core_cpus.values() if cpus <= pool)
            if n > whole:
                return None, (f"SMT alignment error: {what} requests {n} CPUs but only {whole} "
                              "are on free whole cores (full-pcpus-only)")
        if n > len(pool):
            return None, (f"not enough free CPUs: {what} requests {n}, "
                          f"{len(pool)} available")
        if "distribute-cpus-across-numa" in opts:
            group = tpc if "full-pcpus-only" in opts else 1
            got = take_distributed(self.topo, pool, n, group, hint)
        else:
            got = take_with_hint(self.topo, pool, n, hint)
        if got is None:
            return None, f"not enough free CPUs: {what} requests {n}"
        return got, ""

    def _take_memory(self, work: _Work, size: int, hint: frozenset[int] | None,
                     cpus: frozenset[int], what: str) -> tuple[tuple[MemoryBlock, ...], str]:
        if size <= 0 or not self.memory_enabled:
            return (), ""
        nodes = sorted(hint) if hint else sorted(self.topo.numa_set(cpus))
        if not nodes:
            nodes = list(self.topo.numa_nodes)
        if sum(work.mem_free.get(n, 0) for n in nodes) < size:
            return (), (f"insufficient memory: {what} needs {size} bytes on NUMA node(s) "
                        f"{','.join(map(str, nodes))}")
        left = size
        for n in nodes:
            part = min(left, work.mem_free[n])
            work.mem_free[n] -= part
            work.mem_taken[n] = work.mem_taken.get(n, 0) + part
            left -= part
        return (MemoryBlock("memory", size, tuple(nodes)),), ""

    # ---- admission ------------------------------------------------------------------------

    def admit(self, pod: PodSpec) -> PodPlacement | Rejection:
        """Place ``pod`` as the kubelet would, or say why it would reject it."""
        if (pod.namespace, pod.name) in self.pods:
            return Rejection(pod.namespace, pod.name, "a pod with this name is already placed")
        result = self.plan(pod)
        if isinstance(result, Rejection):
            return result
        placement, work = result
        self.free = work.free
        self.mem_free = work.mem_free
        self.pods[placement.key] = placement
        self._mem_held[placement.key] = work.mem_taken
        return placement

    def plan(self, pod: PodSpec) -> tuple[PodPlacement, _Work] | Rejection:
        """Work out a placement without changing the state."""
        work = _Work(free=set(self.free), mem_free=dict(self.mem_free))
        cfg = self.config
        if not cfg.static:
            return self._all_shared(pod, "none", "the CPU manager policy is none"), work
        if cfg.pod_level and pod.has_pod_cpu_budget:
            if not pod.guaranteed:
                return self._all_shared(pod, "none", "not Guaranteed: no exclusive CPUs"), work
            budget = pod.budget_cpus
            if budget is None:
                return self._all_shared(
                    pod, "none", "fractional pod budget: no exclusive CPUs"), work
            if cfg.scope == "pod":
                return self._pod_scope(pod, budget, work)
            return self._container_scope(pod, budget, work)
        return self._legacy(pod, work)

    def _all_shared(self, pod: PodSpec, path: Literal["none", "legacy"], note: str
                    ) -> PodPlacement:
        containers = tuple(
            ContainerTruth(c.name, c.sidecar, False, "node_shared", "node_shared",
                           frozenset(), frozenset())
            for c in pod.long_running)
        return PodPlacement(pod.namespace, pod.name, pod.uid, pod, path, frozenset(), (),
                            containers, None, note)

    def _reject(self, pod: PodSpec, reason: str) -> Rejection:
        return Rejection(pod.namespace, pod.name, reason)

    def _legacy(self, pod: PodSpec, work: _Work) -> tuple[PodPlacement, _Work] | Rejection:
        """Per-container exclusive CPUs from the node pool; init-container CPUs are reused."""
        guaranteed = pod.guaranteed
        ordered = [(c, not c.sidecar) for c in pod.init_containers] + \
            [(c, False) for c in pod.containers]
        hint: frozenset[int] | None = None
        if self.config.scope == "pod":
            app = sum(c.resources.integer_cpus or 0 for c in pod.long_running
                      if pod.eligible(c))
            init = max((c.resources.integer_cpus or 0 for c in pod.init_containers
                        if not c.sidecar and _eligible_init(pod, c)), default=0)
            mem = 0
            if guaranteed:
                mem = max(sum(_mem_limit(c) for c in pod.long_running),
                          max((_mem_limit(c) for c in pod.init_containers if not c.sidecar),
                              default=0))
            hint, err = self._hint(max(app, init), work.free, mem, work.mem_free)
            if err:
                return self._reject(pod, err)
        reusable: set[int] = set()
        exclusive: dict[str, frozenset[int]] = {}
        memory: dict[str, tuple[MemoryBlock, ...]] = {}
        for c, ordinary_init in ordered:
            n = c.resources.integer_cpus or 0
            eligible = _eligible_init(pod, c) if ordinary_init else pod.eligible(c)
            # Init containers' memory is transient and reused: the model does not hold it.
            mem = _mem_limit(c) if guaranteed and not ordinary_init else 0
            if not eligible:
                n = 0
            if self.config.scope == "container" and (n or (mem and self.memory_enabled)):
                hint, err = self._hint(n, work.free | reusable, mem, work.mem_free)
                if err:
                    return self._reject(pod, f"container {c.name}: {err}")
            got: frozenset[int] = frozenset()
            if n:
                taken, err = self._take(work.free | reusable, n, hint, f"container {c.name}")
                if taken is None:
                    return self._reject(pod, err)
                got = taken
                reusable -= got
                work.free -= got
            blocks: tuple[MemoryBlock, ...] = ()
            if mem and self.memory_enabled:
                blocks, err = self._take_memory(work, mem, hint, got, f"container {c.name}")
                if err:
                    return self._reject(pod, err)
            if ordinary_init:
                reusable |= got
            else:
                exclusive[c.name] = got
                memory[c.name] = blocks
        # Init containers have finished: their unused CPUs go back.
        work.free |= reusable
        containers = []
        for c in pod.long_running:
            ex = exclusive.get(c.name, frozenset())
            blocks = memory.get(c.name, ())
            containers.append(ContainerTruth(
                c.name, c.sidecar, bool(ex), "node_exclusive" if ex else "node_shared",
                "node_exclusive" if blocks else "node_shared", ex, ex, blocks))
        note = "" if any(c.exclusive for c in containers) else \
            ("not Guaranteed: no exclusive CPUs" if not guaranteed
             else "no container asks for whole CPUs")
        return PodPlacement(pod.namespace, pod.name, pod.uid, pod, "legacy", frozenset(), (),
                            tuple(containers), hint, note), work

    def _pod_scope(self, pod: PodSpec, budget: int, work: _Work
                   ) -> tuple[PodPlacement, _Work] | Rejection:
        """One NUMA-aligned block of the budget; slices carved from it (SPEC §2.2)."""
        long_running = pod.long_running
        eligible = {c.name: pod.eligible(c) for c in long_running}
        slices = {c.name: c.resources.integer_cpus or 0 for c in long_running
                  if eligible[c.name]}
        need = sum(slices.values())
        if need > budget:
            return self._reject(pod, f"exclusive containers need {need} CPUs, more than the "
                                     f"pod budget of {budget}")
        for c in pod.init_containers:
            if not c.sidecar and _eligible_init(pod, c) \
                    and (c.resources.integer_cpus or 0) > budget:
                return self._reject(pod, f"init container {c.name} needs "
                                         f"{c.resources.integer_cpus} CPUs, more than the pod "
                                         f"budget of {budget}")
        shared_needed = [c.name for c in long_running if not eligible[c.name]]
        if shared_needed and need >= budget:
            return self._reject(pod, f"empty pod shared pool: exclusive containers use the "
                                     f"whole pod budget of {budget} CPUs, and "
                                     f"{', '.join(shared_needed)} would need the shared pool")
        pod_mem = pod.resources.memory_limit if pod.resources else None
        pod_mem = pod_mem or 0
        slice_mem = {c.name: _mem_limit(c) for c in long_running if eligible[c.name]}
        if pod_mem and sum(slice_mem.values()) > pod_mem:
            return self._reject(pod, "memory over budget: exclusive containers' memory exceeds "
                                     "the pod memory budget")
        hint, err = self._hint(budget, work.free, pod_mem, work.mem_free)
        if err:
            return self._reject(pod, err)
        block, err = self._take(work.free, budget, hint, "pod budget")
        if block is None:
            return self._reject(pod, err)
        work.free -= block
        block_memory, err = self._take_memory(work, pod_mem, hint, block, "pod budget")
        if err:
            return self._reject(pod, err)
        mem_nodes = block_memory[0].numa_nodes if block_memory else ()
        inside = set(block)
        reusable: set[int] = set()
        exclusive: dict[str, frozenset[int]] = {}
        for c, ordinary_init in [(c, not c.sidecar) for c in pod.init_containers] + \
                [(c, False) for c in pod.containers]:
            if ordinary_init:
                n = (c.resources.integer_cpus or 0) if _eligible_init(pod, c) else 0
            else:
                n = slices.get(c.name, 0)
            if not n:
                continue
            got, err = self._take(inside | reusable, n, None, f"container {c.name}")
            if got is None:
                return self._reject(pod, err)
            inside -= got
            reusable -= got
            if ordinary_init:
                reusable |= got
            else:
                exclusive[c.name] = got
        shared_pool = block - frozenset().union(*exclusive.values()) if exclusive else block
        containers = []
        for c in long_running:
            ex = exclusive.get(c.name, frozenset())
            if ex:
                blocks = (MemoryBlock("memory", slice_mem[c.name], mem_nodes),) \
                    if block_memory and slice_mem[c.name] else ()
                mem_assign: Assignment = "pod_exclusive" if blocks else "pod_shared"
                if not block_memory:
                    mem_assign = "node_shared"
                containers.append(ContainerTruth(
                    c.name, c.sidecar, True, "pod_exclusive", mem_assign, ex, ex, blocks))
            else:
                containers.append(ContainerTruth(
                    c.name, c.sidecar, False, "pod_shared",
                    "pod_shared" if block_memory else "node_shared", frozenset(),
                    shared_pool, ()))
        return PodPlacement(pod.namespace, pod.name, pod.uid, pod, "pod", block, block_memory,
                            tuple(containers), hint), work

    def _container_scope(self, pod: PodSpec, budget: int, work: _Work
                         ) -> tuple[PodPlacement, _Work] | Rejection:
        """Container scope with a pod budget: exclusive containers from the node pool, the
        rest on the node shared pool; the budget caps the exclusive total."""
        long_running = pod.long_running
        need = sum(c.resources.integer_cpus or 0 for c in long_running if pod.eligible(c))
        if need > budget:
            return self._reject(pod, f"exclusive containers need {need} CPUs, more than the "
                                     f"pod budget of {budget}")
        shared_needed = [c.name for c in long_running if not pod.eligible(c)]
        if shared_needed and need >= budget:
            return self._reject(pod, f"empty pod shared pool: exclusive containers use the "
                                     f"whole pod budget of {budget} CPUs, and "
                                     f"{', '.join(shared_needed)} would need the shared pool")
        result = self._legacy(pod, work)
        if isinstance(result, Rejection):
            return result
        placement, work = result
        return PodPlacement(placement.namespace, placement.name, placement.uid, pod,
                            "container", frozenset(), (), placement.containers,
                            placement.numa_hint, placement.note), work

    # ---- release --------------------------------------------------------------------------

    def release(self, namespace: str, name: str) -> PodPlacement | None:
        """Remove a pod: its whole block (or its exclusive sets) and memory go back."""
        placement = self.pods.pop((namespace, name), None)
        if placement is None:
            return None
        self.free |= placement.held
        for node, size in self._mem_held.pop((namespace, name), {}).items():
            self.mem_free[node] += size
        return placement


def _eligible_init(pod: PodSpec, c: ContainerSpec) -> bool:
    """An ordinary init container gets (reusable) exclusive CPUs under the same rule."""
    if not pod.guaranteed:
        return False
    r = c.resources
    return r.guaranteed and r.integer_cpus is not None
