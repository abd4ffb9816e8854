"""Snapshot → ledger: classification (SPEC §3.2), CPU and memory pools (§3.1), estimates
(§3.3) and anomalies (§3.4).

Every CPU is owned at most once. Ownership is decided in ``List`` order: pod by pod, and
inside a pod its exclusive sets (in container order) before its shared or idle remainder.
Pod-level and container-level lists are never added together.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter

from reconciler.cpuset import MAX_CPU_ID, format_cpuset
from reconciler.estimates import legacy_cost, reclaimable_cores
from reconciler.kube import KubeletConfig, PodSpec
from reconciler.ledger import (
    CPU_POOLS,
    Anomaly,
    Assignment,
    Basis,
    ContainerEntry,
    CPUCell,
    Ledger,
    PodEntry,
    PoolCounts,
)
from reconciler.snapshot import ContainerAlloc, MemoryBlock, NodeSnapshot, PodAlloc


@dataclass(slots=True)
class _PodView:
    """The classification of one listed pod, before CPUs are handed to pools."""

    alloc: PodAlloc
    spec: PodSpec | None
    block: frozenset[int]  # B: the pod block (online ids only)
    pod_level: bool
    legacy_pattern: bool
    assignments: list[Assignment]
    sets: list[frozenset[int]]  # each container's own reported set, online ids only
    exclusive: frozenset[int] = frozenset()
    remainder: frozenset[int] = frozenset()
    anomalies: list[Anomaly] = field(default_factory=list)
    plain: bool = False  # no CPU reported at all: every container node_shared


MemoryKey = tuple[tuple[str, int, tuple[int, ...]], ...]


@dataclass(slots=True)
class _PodMemory:
    assignments: list[Assignment]
    sizes: list[int]  # bytes attributed to each container
    rows: tuple[tuple[str, str, int], ...]  # (pool, memory_type, bytes) of the pod
    plain: bool = False  # no memory reported at all: every container node_shared


def _memory_key(c: ContainerAlloc) -> MemoryKey:
    return tuple(sorted((b.memory_type, b.size, b.numa_nodes) for b in c.memory))


def _by_type(blocks: Iterable[MemoryBlock]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for b in blocks:
        out[b.memory_type] += b.size
    return dict(out)


def _memory_pools(memory: Iterable[_PodMemory]) -> tuple[tuple[str, tuple[int, int, int]], ...]:
    slots = {"node_exclusive": 0, "pod_exclusive": 1, "pod_shared": 2}
    pools: dict[str, list[int]] = {}
    for pod in memory:
        for pool, mtype, size in pod.rows:
            pools.setdefault(mtype, [0, 0, 0])[slots[pool]] += size
    return tuple((mtype, (v[0], v[1], v[2])) for mtype, v in sorted(pools.items()))


_EMPTY: frozenset[int] = frozenset()

_CPU_IDS_OF = attrgetter("cpu_ids")
_MEMORY_OF = attrgetter("memory")



def _plain_pod_entry(namespace: str, name: str, budget: int | None, basis: Basis, uid: str,
                     memory: tuple[tuple[str, str, int], ...]) -> PodEntry:
    """The entry of a pod that owns no CPU (the common case): no block, no counts,
    nothing reclaimable (§3.3)."""
    return PodEntry(namespace, name, _EMPTY, budget, 0, 0, 0, 0, None, 0, basis, uid, memory)



def _sidecar_names(spec: PodSpec | None) -> frozenset[str]:
    """Names that ``spec.container(name)`` resolves to a sidecar (the first container of a
    name wins, as there)."""
    if spec is None or not spec.init_containers:
        return _EMPTY_NAMES
    first: dict[str, bool] = {}
    for c in spec.long_running:
        first.setdefault(c.name, c.sidecar)
    return frozenset(name for name, sidecar in first.items() if sidecar)


_EMPTY_NAMES: frozenset[str] = frozenset()


def reconcile(snapshot: NodeSnapshot) -> Ledger:
    return _Reconciler(snapshot).run()


def _valid(cpu: int) -> bool:
    return 0 <= cpu <= MAX_CPU_ID


class _Reconciler:
    def __init__(self, snapshot: NodeSnapshot) -> None:
        self.snap = snapshot
        self.config: KubeletConfig | None = snapshot.kubelet_config
        self.topology = snapshot.topology
        self.numa_of: dict[int, int] = self.topology.numa_of() if self.topology else {}
        self.online = self._online_cpus()
        self.reserved = self._reserved_cpus()
        self.specs = self._index_specs(snapshot.pod_specs)
        self.anomalies: list[Anomaly] = []
        self._plain_lists: dict[int, tuple[list[Assignment], list[frozenset[int]]]] = {}
        self._plain_memory: dict[int, _PodMemory] = {}

    # -- node facts -------------------------------------------------------------------

    def _online_cpus(self) -> frozenset[int]:
        if self.topology is not None:
            return self.topology.online
        ids: set[int] = set()
        if self.snap.allocatable is not None:
            ids.update(self.snap.allocatable.cpu_ids)
        if self.config is not None and self.config.reserved_system_cpus:
            ids.update(self.config.reserved_system_cpus)
        for pod in self.snap.pods:
            ids.update(pod.cpu_ids)
            for c in pod.containers:
                ids.update(c.cpu_ids)
        return frozenset(cpu for cpu in ids if _valid(cpu))

    def _reserved_cpus(self) -> frozenset[int]:
        alloc = self.snap.allocatable
        if alloc is not None and alloc.cpu_ids:
            return self.online - frozenset(alloc.cpu_ids)
        if self.config is not None and self.config.reserved_system_cpus:
            return self.config.reserved_system_cpus & self.online
        return frozenset()

    @staticmethod
    def _index_specs(specs: Iterable[PodSpec] | None) -> dict[tuple[str, str], PodSpec]:
        if specs is None:
            return {}
        index: dict[tuple[str, str], PodSpec] = {}
        for spec in specs:
            index.setdefault((spec.namespace, spec.name), spec)
        return index

    def _anomaly(self, kind: str, pod: PodAlloc | None, container: str | None,
                 detail: str) -> None:
        self.anomalies.append(Anomaly(kind, pod.namespace if pod else None,
                                      pod.name if pod else None, container, detail))

    def _known(self, ids: Iterable[int], pod: PodAlloc, container: str | None) -> frozenset[int]:
        """The online subset of reported ids; the rest raise ``unknown_cpu`` once."""
        if not ids:
            return _EMPTY
        reported = frozenset(ids)
        known = reported & self.online
        if len(known) != len(reported):
            bad = sorted(reported - known)
            shown = ",".join(str(i) for i in bad[:16]) + (",…" if len(bad) > 16 else "")
            self._anomaly("unknown_cpu", pod, container,
                          f"reported CPU ids not online on this node: {shown}")
        return known

    # -- classification (§3.2) ----------------------------------------------------------

    def _classify(self, pod: PodAlloc) -> _PodView:
        spec = self.specs.get((pod.namespace, pod.name))
        if not pod.cpu_ids and not any(map(_CPU_IDS_OF, pod.containers)):
            # The common case on a busy node (nothing exclusive): every container shared.
            n = len(pod.containers)
            lists = self._plain_lists.get(n)
            if lists is None:  # shared by every such pod: read-only from here on
                lists = self._plain_lists[n] = (["node_shared"] * n, [_EMPTY] * n)
            return _PodView(pod, spec, _EMPTY, False, False, lists[0], lists[1], plain=True)
        block = self._known(pod.cpu_ids, pod, None)
        sets = [self._known(c.cpu_ids, pod, c.name) for c in pod.containers]
        raw = [frozenset(c.cpu_ids) for c in pod.containers]
        if pod.cpu_ids:
            assignments: list[Assignment] = [
                "pod_exclusive" if r else "pod_shared" for r in raw]
            return _PodView(pod, spec, block, True, False, assignments, sets)
        shared_idx = self._legacy_shared(raw, spec)
        if shared_idx:
            assignments = ["pod_shared" if (i in shared_idx or not r) else "pod_exclusive"
                           for i, r in enumerate(raw)]
            union = frozenset().union(*sets)
            view = _PodView(pod, spec, union, True, True, assignments, sets)
            self._anomaly("legacy_shared_report", pod, None,
                          "containers report the pod shared pool as their own CPUs "
                          "(1.36 reporting); counted once as pod_shared")
            return view
        assignments = ["node_exclusive" if r else "node_shared" for r in raw]
        return _PodView(pod, spec, frozenset(), False, False, assignments, sets)

    @staticmethod
    def _legacy_shared(raw: list[frozenset[int]], spec: PodSpec | None) -> set[int]:
        """Indexes of containers that report a shared set (the 1.36 pattern), or none."""
        nonempty = [(i, s) for i, s in enumerate(raw) if s]
        if len(nonempty) < 2:
            return set()
        identical: dict[frozenset[int], list[int]] = defaultdict(list)
        for i, s in nonempty:
            identical[s].append(i)
        shared = {i for group in identical.values() if len(group) >= 2 for i in group}
        if spec is not None and spec.has_pod_cpu_budget:
            for a, (i, si) in enumerate(nonempty):
                for j, sj in nonempty[a + 1:]:
                    if si & sj:
                        shared.update((i, j))
        return shared

    # -- the whole node -------------------------------------------------------------------

    def run(self) -> Ledger:
        owner: dict[int, tuple[str, int, str]] = {}  # cpu → (pool, pod index, owner name)
        containers: list[ContainerEntry] = []
        pods: list[PodEntry] = []
        memory: list[_PodMemory] = []
        late: list[list[Anomaly]] = []  # per pod, after every pod's classification ones
        for index, pod in enumerate(self.snap.pods):
            if not (pod.cpu_ids or pod.memory or any(map(_CPU_IDS_OF, pod.containers))
                    or any(map(_MEMORY_OF, pod.containers))):
                pods.append(self._plain_pod(pod, containers, late))
                continue
            # Pod by pod: classification, then CPU ownership in List order, then memory;
            # a pod's own anomalies in that order.
            view = self._classify(pod)
            self._assign(index, view, owner)
            mem = self._memory(view)
            memory.append(mem)
            pods.append(self._view_entries(view, mem, containers))
            late.append(view.anomalies)
        pools, by_numa, cells = self._pools(owner)
        for anomalies in late:
            self.anomalies.extend(anomalies)
        return Ledger(
            node_name=self.snap.node_name,
            online_cpus=len(self.online),
            numa_nodes=len(self.topology.numa_nodes) if self.topology else None,
            kubelet=self._kubelet_info(),
            cpu_pools=pools,
            cpu_pools_by_numa=by_numa,
            memory_pools=_memory_pools(memory),
            pods=tuple(pods),
            containers=tuple(containers),
            reclaimed_cpus=sum(p.reclaimed_cpus or 0 for p in pods),
            reclaimable_cpus=sum(p.reclaimable_cpus or 0 for p in pods),
            anomalies=tuple(self.anomalies),
            cpu_map=cells,
            checkpoints=self.snap.checkpoints,
        )

    def _plain_pod(self, pod: PodAlloc, containers: list[ContainerEntry],
                   late: list[list[Anomaly]]) -> PodEntry:
        """A pod that reports nothing (no CPU, no memory: the common case on a busy node):
        every container node_shared, no block, nothing reclaimable (§3.3); it owns no CPU,
        so only its spec can show something wrong."""
        spec = self.specs.get((pod.namespace, pod.name)) if self.specs else None
        namespace, name = pod.namespace, pod.name
        add, make = containers.append, ContainerEntry
        if spec is None:
            for c in pod.containers:
                add(make(namespace, name, c.name, False, "node_shared", "node_shared",
                         _EMPTY, 0))
            late.append([])
            return _plain_pod_entry(namespace, name, None, "podresources", "", ())
        sidecars = _sidecar_names(spec)
        for c in pod.containers:
            add(make(namespace, name, c.name, c.name in sidecars, "node_shared",
                     "node_shared", _EMPTY, 0))
        anomalies: list[Anomaly] = []
        if self.config is not None and self.config.static_cpu:
            anomalies = self._missing_exclusive(
                pod, spec, ["node_shared"] * len(pod.containers))
        late.append(anomalies)
        return _plain_pod_entry(namespace, name, spec.budget_cpus, "spec", spec.uid, ())

    def _assign(self, index: int, view: _PodView, owner: dict[int, tuple[str, int, str]]) -> None:
        if view.plain:  # owns no CPU: only the spec can tell something is wrong
            if view.spec is not None:
                self._spec_anomalies(view)
            return
        pod = view.alloc
        exclusive: set[int] = set()
        overlaps: dict[int, set[int]] = defaultdict(set)
        for c, assignment, cpus in zip(pod.containers, view.assignments, view.sets,
                                       strict=True):
            if assignment not in ("pod_exclusive", "node_exclusive"):
                continue
            if assignment == "pod_exclusive" and not view.legacy_pattern and cpus - view.block:
                view.anomalies.append(Anomaly(
                    "container_outside_pod", pod.namespace, pod.name, c.name,
                    f"exclusive CPUs {format_cpuset(cpus - view.block)} are outside the "
                    f"pod block {format_cpuset(view.block)}"))
            name = f"{pod.namespace}/{pod.name}/{c.name}"
            for cpu in cpus:
                held = owner.get(cpu)
                if held is None:
                    owner[cpu] = (assignment, index, name)
                elif held[1] != index:
                    overlaps[held[1]].add(cpu)
            exclusive |= cpus
        view.exclusive = frozenset(exclusive)
        view.remainder = view.block - view.exclusive
        has_shared = "pod_shared" in view.assignments
        if view.pod_level:
            pool = "pod_shared" if has_shared else "pod_idle"
            name = f"{pod.namespace}/{pod.name}"
            for cpu in view.remainder:
                held = owner.get(cpu)
                if held is None:
                    owner[cpu] = (pool, index, name)
                elif held[1] != index:
                    overlaps[held[1]].add(cpu)
            if has_shared and not view.remainder:
                view.anomalies.append(Anomaly(
                    "empty_pod_shared_pool", pod.namespace, pod.name, None,
                    "pod-shared containers have no CPU left in the pod block "
                    f"{format_cpuset(view.block) or '(empty)'}"))
        for other, taken in overlaps.items():
            first = self.snap.pods[other]
            view.anomalies.append(Anomaly(
                "exclusive_overlap", pod.namespace, pod.name, None,
                f"CPUs {format_cpuset(taken)} are already exclusive to "
                f"{first.namespace}/{first.name}; counted once, for the first owner"))
        assigned_reserved = (view.exclusive | view.block) & self.reserved
        if assigned_reserved:
            view.anomalies.append(Anomaly(
                "reserved_cpu_assigned", pod.namespace, pod.name, None,
                f"reserved CPUs {format_cpuset(assigned_reserved)} are allocated to the pod"))
        self._spec_anomalies(view)

    def _spec_anomalies(self, view: _PodView) -> None:
        pod, spec = view.alloc, view.spec
        single_numa = (self.config is not None and self.topology is not None
                       and self.config.topology_manager_policy == "single-numa-node")
        if single_numa:
            subjects: list[tuple[str | None, frozenset[int]]] = []
            if view.pod_level and not view.legacy_pattern:
                subjects.append((None, view.block))
            subjects += [(c.name, s) for c, a, s in zip(pod.containers, view.assignments,
                                                         view.sets, strict=True)
                         if a in ("pod_exclusive", "node_exclusive")]
            for container, cpus in subjects:
                nodes = {self.numa_of[cpu] for cpu in cpus if cpu in self.numa_of}
                if len(nodes) > 1:
                    view.anomalies.append(Anomaly(
                        "numa_misaligned", pod.namespace, pod.name, container,
                        f"CPUs {format_cpuset(cpus)} span NUMA nodes "
                        f"{','.join(str(n) for n in sorted(nodes))} under single-numa-node"))
        if spec is None:
            return
        if view.pod_level and not view.legacy_pattern and view.block:
            budget = spec.budget_cpus
            if budget != len(view.block):
                want = "no integer pod CPU budget" if budget is None else f"budget {budget}"
                view.anomalies.append(Anomaly(
                    "budget_mismatch", pod.namespace, pod.name, None,
                    f"pod block holds {len(view.block)} CPUs but the spec has {want}"))
        if self.config is not None and self.config.static_cpu:
            view.anomalies += self._missing_exclusive(pod, spec, view.assignments)

    @staticmethod
    def _missing_exclusive(pod: PodAlloc, spec: PodSpec, assignments: list[Assignment],
                           ) -> list[Anomaly]:
        """Under the static policy: eligible containers (§2.2) that got no exclusive CPU."""
        found: list[Anomaly] = []
        if spec.has_pod_cpu_budget and spec.budget_cpus is None:
            return found  # a fractional pod budget gets no exclusive CPUs at all
        for c, assignment in zip(pod.containers, assignments, strict=True):
            cspec = spec.container(c.name)
            if cspec is None:
                continue
            if spec.eligible(cspec) and assignment not in ("pod_exclusive", "node_exclusive"):
                found.append(Anomaly(
                    "missing_exclusive", pod.namespace, pod.name, c.name,
                    f"eligible for {cspec.resources.integer_cpus} exclusive CPUs under "
                    "the static policy but reported none"))
        return found

    # -- entries ----------------------------------------------------------------------

    def _view_entries(self, view: _PodView, mem: _PodMemory,
                      containers: list[ContainerEntry]) -> PodEntry:
        """Appends the pod's container entries; returns its pod entry."""
        pod, spec = view.alloc, view.spec
        namespace, pod_name = pod.namespace, pod.name
        sidecars = _sidecar_names(spec)
        add = containers.append
        for c, assignment, cpus, mem_assignment, mem_bytes in zip(
                pod.containers, view.assignments, view.sets, mem.assignments, mem.sizes,
                strict=True):
            if assignment == "pod_shared":
                held = view.remainder
            elif assignment == "node_shared":
                held = _EMPTY
            else:
                held = cpus
            # Positional: the field order of ContainerEntry (the hot loop of a node).
            add(ContainerEntry(namespace, pod_name, c.name, c.name in sidecars,
                                 assignment, mem_assignment, held, mem_bytes))
        return self._pod_entry(view, mem.rows)

    def _pod_entry(self, view: _PodView, memory: tuple[tuple[str, str, int], ...]) -> PodEntry:
        pod, spec = view.alloc, view.spec
        basis: Basis = "spec" if spec is not None else "podresources"
        if view.plain:
            # No block, nothing exclusive: no CPU counts, nothing reclaimable (§3.3).
            return _plain_pod_entry(pod.namespace, pod.name,
                                    spec.budget_cpus if spec else None, basis,
                                    spec.uid if spec else "", memory)
        has_shared = "pod_shared" in view.assignments
        node_exclusive = frozenset().union(*(
            s for a, s in zip(view.assignments, view.sets, strict=True)
            if a == "node_exclusive"))
        reclaimed: int | None = None
        reclaimable: int | None = None
        if view.pod_level:
            shared_specs = [spec.container(c.name) if spec else None for c in pod.containers]
            cost = legacy_cost(
                [(a in ("pod_exclusive", "node_exclusive"), len(s),
                  cs.resources if cs is not None else None)
                 for a, s, cs in zip(view.assignments, view.sets, shared_specs, strict=True)])
            reclaimed = cost - len(view.block)
        else:
            reclaimable = reclaimable_cores(
                [len(s) for a, s in zip(view.assignments, view.sets, strict=True)
                 if a == "node_exclusive"])
        return PodEntry(
            namespace=pod.namespace, name=pod.name, cpus=view.block,
            budget_cpus=spec.budget_cpus if spec else None,
            pod_exclusive_cpus=len(view.exclusive) if view.pod_level else 0,
            pod_shared_cpus=len(view.remainder) if view.pod_level and has_shared else 0,
            pod_idle_cpus=len(view.remainder) if view.pod_level and not has_shared else 0,
            node_exclusive_cpus=len(node_exclusive),
            reclaimed_cpus=reclaimed, reclaimable_cpus=reclaimable, estimate_basis=basis,
            uid=spec.uid if spec else "", memory=memory,
        )

    # -- pools (§3.1) -----------------------------------------------------------------

    def _pools(self, owner: Mapping[int, tuple[str, int, str]],
               ) -> tuple[PoolCounts, tuple[tuple[int, PoolCounts], ...], tuple[CPUCell, ...]]:
        counts = dict.fromkeys(CPU_POOLS, 0)
        numa_counts: dict[int, dict[str, int]] = {}
        if self.topology is not None:
            numa_counts = {n: dict.fromkeys(CPU_POOLS, 0) for n in self.topology.numa_nodes}
        info = {c.id: c for c in self.topology.cpus} if self.topology else {}
        cells: list[CPUCell] = []
        for cpu in sorted(self.online):
            held = owner.get(cpu)
            if held is not None:
                pool, who = held[0], held[2]
            elif cpu in self.reserved:
                pool, who = "reserved", ""
            else:
                pool, who = "node_shared", ""
            counts[pool] += 1
            meta = info.get(cpu)
            if meta is not None:
                numa_counts[meta.numa_node][pool] += 1
                cells.append(CPUCell(cpu, pool, meta.core, meta.socket, meta.numa_node, who))
            else:
                cells.append(CPUCell(cpu, pool, owner=who))
        by_numa = tuple((n, PoolCounts(**c)) for n, c in sorted(numa_counts.items()))
        return PoolCounts(**counts), by_numa, tuple(cells)

    # -- memory -----------------------------------------------------------------------

    def _memory(self, view: _PodView) -> _PodMemory:
        """Memory classification, analogous to CPU but by quantity per memory type.

        The 1.36 pattern (shared containers reporting the pod's shared memory as their
        own) is only believed when the CPUs of the same pod showed it: two ordinary
        containers may well hold identical blocks (same size, same NUMA node).
        """
        pod, spec = view.alloc, view.spec
        if not pod.memory and not any(map(_MEMORY_OF, pod.containers)):
            n = len(pod.containers)
            plain = self._plain_memory.get(n)
            if plain is None:  # shared by every such pod: read-only from here on
                plain = self._plain_memory[n] = _PodMemory(["node_shared"] * n, [0] * n, (),
                                                           plain=True)
            return plain
        keys = [_memory_key(c) for c in pod.containers]
        shared_keys: set[MemoryKey] = set()
        if view.legacy_pattern and not pod.memory:
            seen: set[MemoryKey] = set()
            for key in keys:
                if key and key in seen:
                    shared_keys.add(key)
                seen.add(key)
        shares = [bool(key) and key in shared_keys for key in keys]

        exclusive: dict[str, int] = defaultdict(int)
        for c, shared in zip(pod.containers, shares, strict=True):
            if not shared:
                for b in c.memory:
                    exclusive[b.memory_type] += b.size
        if pod.memory:
            pod_total = _by_type(pod.memory)
        elif shared_keys:
            pod_total = dict(exclusive)
            for key in shared_keys:
                for mtype, size, _ in key:
                    pod_total[mtype] = pod_total.get(mtype, 0) + size
        else:
            pod_total = {}
        pod_level = bool(pod_total)

        shared_left: dict[str, int] = {}
        for mtype, total in pod_total.items():
            left = total - exclusive.get(mtype, 0)
            if left < 0:
                view.anomalies.append(Anomaly(
                    "memory_over_budget", pod.namespace, pod.name, None,
                    f"containers hold {exclusive[mtype]} bytes of {mtype}, more than the "
                    f"pod's {total}"))
            shared_left[mtype] = max(0, left)
        budget = spec.resources.memory_limit if spec and spec.resources else None
        if budget is not None and pod.memory and pod_total.get("memory", 0) > budget:
            view.anomalies.append(Anomaly(
                "memory_over_budget", pod.namespace, pod.name, None,
                f"pod memory blocks hold {pod_total['memory']} bytes, over the pod budget "
                f"of {budget}"))

        assignments: list[Assignment] = []
        sizes: list[int] = []
        for c, shared in zip(pod.containers, shares, strict=True):
            own = sum(b.size for b in c.memory)
            if pod_level:
                a: Assignment = "pod_exclusive" if c.memory and not shared else "pod_shared"
            else:
                a = "node_exclusive" if c.memory else "node_shared"
            assignments.append(a)
            sizes.append(sum(shared_left.values()) if a == "pod_shared"
                         else own if a != "node_shared" else 0)
        pool = "pod_exclusive" if pod_level else "node_exclusive"
        rows = [(pool, mtype, size) for mtype, size in sorted(exclusive.items())]
        rows += [("pod_shared", mtype, size) for mtype, size in sorted(shared_left.items())]
        return _PodMemory(assignments, sizes, tuple(rows))

    def _kubelet_info(self) -> tuple[tuple[str, object], ...]:
        info: dict[str, object] = {}
        if self.config is not None:
            info.update(
                cpu_manager_policy=self.config.cpu_manager_policy,
                memory_manager_policy=self.config.memory_manager_policy,
                topology_manager_policy=self.config.topology_manager_policy,
                topology_manager_scope=self.config.topology_manager_scope,
                pod_level_resource_managers=self.config.pod_level_resource_managers,
            )
        info.update(self.snap.kubelet_info)
        return tuple(info.items())
