"""The model node's state and how CPUs and memory are taken from it (docs/design.md#allocator):
the reserved and default sets, the free CPUs and memory, the pods placed, and the static
policy's take (``allocateCPUs``, ``takeByTopology``, ``full-pcpus-only``)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable

from reconciler.allocator.config import ModelConfig, ModelError
from reconciler.allocator.devices import NodeDevices
from reconciler.allocator.hints import HintRecord, MaskTable
from reconciler.allocator.memory_state import MachineState
from reconciler.allocator.placement import PodPlacement
from reconciler.allocator.rules import (
    Refused,
    not_enough_cpus,
    smt_alignment_error,
)
from reconciler.allocator.take import (
    policy_taker,
    take_with_hint,
)
from reconciler.allocator.topology import CPUTopology
from reconciler.cpuset import format_cpuset
from reconciler.pools import CPU_POOLS as POOLS


class NodeCore:
    """One node's allocation state: reserved set, default set, per-pod assignments,
    and the take that hands CPUs and memory out of it."""

    def __init__(self, topo: CPUTopology, config: ModelConfig | None = None,
                 devices: NodeDevices | None = None) -> None:
        self.topo = topo
        self.config = config or ModelConfig()
        # Device-plugin devices (docs/design.md#devices-in-the-model): what is free, and
        # what each pod holds.
        self.devices = devices or NodeDevices()
        self.dev_free: dict[str, set[str]] = self.devices.free()
        # By pod, container (ordinary init containers too) and resource: device IDs.
        self._dev_held: dict[tuple[str, str], dict[str, dict[str, frozenset[str]]]] = {}
        # Where ``devicesToAllocate`` walks a Go set the kubelet's pick is one of several:
        # the devices it took (by pod UID, container and resource) when they are known (the
        # differential reads them back), which the pod's admission takes where the model's
        # choice allows them, and by pod the "container/resource" where it does not.
        self.device_picks: dict[str, dict[str, dict[str, frozenset[str]]]] = {}
        self.device_misses: dict[tuple[str, str], list[str]] = {}
        # The device manager's checkpoint as last written (it writes when it allocates, not
        # when it drops a gone pod's devices): by pod, resource and IDs. A restart reads it
        # back, and the devices of pods no longer there stay taken until the restart is
        # over (restart.py).
        self._dev_ckpt: dict[tuple[str, str], dict[str, frozenset[str]]] = {}
        self.reserved: frozenset[int] = self._reserve()
        online = topo.online
        # CPUs that may be handed out exclusively: default set − reserved.
        self.free: set[int] = set(online - self.reserved) if self.config.static else set()
        self.memory_enabled = (self.config.memory_policy == "Static" and bool(topo.memory))
        # The Static memory manager's machine state (docs/design.md#memory-in-the-model).
        self.mem = MachineState.fresh(topo.memory_types())
        self.pods: dict[tuple[str, str], PodPlacement] = {}
        # Each node-exclusive container's CPUs as admitted: what a shrink keeps.
        self._admitted: dict[tuple[str, str, str], frozenset[int]] = {}
        # A checkpoint's exclusive sets, by (pod UID, container name); see from_checkpoint.
        self.checkpointed: dict[tuple[str, str], frozenset[int]] = {}
        # CPUs a checkpoint puts neither in its default set nor in any container, or that a
        # kubelet restart leaks (docs/design.md#allocator).
        self._unaccounted: frozenset[int] = frozenset()
        # Reserved CPUs a restored default set holds under strict-cpu-reservation, which the
        # kubelet then refuses to start with (from_checkpoint, start.py).
        self._default_reserved: frozenset[int] = frozenset()
        # Pod-level blocks of refused pods, kept by pod UID in the state with no container.
        self.orphan_blocks: dict[str, frozenset[int]] = {}
        # CPUs the takes of the pod being placed claimed though they were not in the pool:
        # a socket or core taken whole with CPUs in use (docs/design.md#allocator).
        self.grabbed: set[int] = set()
        self._masks = MaskTable(topo.numa_nodes, self.config.max_numa_nodes)
        self._closest = self._topology_options()
        self._numa_size = {n: len(cpus) for n, cpus in topo.numa_cpus.items()}
        self._numa_memory = {n: topo.memory_of(n) for n in topo.numa_nodes}
        self._widths: dict[tuple[str, int], int | None] = {}
        self._numas_of_socket = {s: topo.numa_set(cpus) for s, cpus in topo.socket_cpus.items()}
        self._mask_sockets: dict[frozenset[int], frozenset[int]] = {}
        self._sockets_of_numa = {n: frozenset(topo.by_id[c].socket for c in cpus)
                                 for n, cpus in topo.numa_cpus.items()}
        counts = topo.kubelet_counts  # the kubelet compares its counts, not the rows
        if "align-by-socket" in self.config.options and counts.sockets > counts.numa_nodes:
            raise ModelError("align-by-socket is not compatible with hardware where number of "
                             "sockets are more than number of NUMA nodes")
        if self.config.memory_policy == "Static":
            # getTotalMemoryTypeReserved (memorymanager/memory_manager.go), the memory
            # manager's one refusal that needs the machine; kubelet_refusal has the rest.
            # cAdvisor lists a NUMA node with memory and no CPU too (GetNodesInfo).
            nodes = set(topo.numa_cpus) | {n for n, _ in topo.memory}
            for numa, _, _ in self.config.reserved_memory:
                if numa not in nodes:
                    raise ModelError("the reserved memory configuration references a NUMA "
                                     f"node {numa} that does not exist on this machine")
        # full-pcpus-only never hands out a thread whose sibling is reserved.
        self._reserved_cores = frozenset().union(
            *(topo.core_cpus[topo.by_id[c].core] for c in self.reserved))
        # Read-only hook for ``explain`` (docs/explain.md): told every merge the topology
        # manager makes, with each provider's hints and the mask chosen (or the refusal).
        self.on_hint: Callable[[HintRecord], None] | None = None

    def _topology_options(self) -> Callable[[frozenset[int]], float] | None:
        """The topology manager's start-up checks of its options (``NewManager``,
        ``NewNUMAInfo``), and the distance that prefer-closest-numa-nodes compares masks
        by, when set."""
        cfg, topo = self.config, self.topo
        if cfg.topology_policy != "none" and len(topo.numa_nodes) > cfg.max_numa_nodes:
            raise ModelError(f"unsupported on machines with more than {cfg.max_numa_nodes} "
                             "NUMA Nodes")
        if not cfg.prefer_closest_numa or cfg.topology_policy == "none":
            return None  # the none policy's NewManager reads no option
        rows = dict(topo.distances)
        top = max(topo.numa_nodes)
        if any(len(rows.get(n, ())) <= top for n in topo.numa_nodes):
            raise ModelError("error getting NUMA distances from cadvisor")
        return functools.cache(topo.average_distance)

    def _reserve(self) -> frozenset[int]:
        if not self.config.static:
            return frozenset()  # NewManager reserves nothing for the none policy
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
            # A pod block's slices are carved inside the block and leave the default set
            # alone, a CPU one claimed outside it included (docs/design.md#allocator).
            held |= p.block or p.held
        base = self.topo.online
        if "strict-cpu-reservation" in self.config.options:
            base = (base - self.reserved) | self._default_reserved
        # A CPU both free and held: the kubelet took it whole with a socket or core while
        # another container held it, and gave it back to the default set when one of the
        # two went (docs/design.md#allocator).
        return (base - held) | (held & self.free)

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

    def allocate_cpus(self, n: int, numa_hint: frozenset[int] | None,
                      pool: Iterable[int] | None = None) -> frozenset[int]:
        """The static policy's ``allocateCPUs``: ``n`` CPUs out of ``pool`` (the free CPUs
        by default), the hinted NUMA nodes first. Raises :class:`ModelError` with the
        kubelet's reason when it cannot."""
        try:
            return self._take(self.free if pool is None else pool, n, numa_hint, "request",
                              default=self.free)
        except Refused as exc:
            raise ModelError(str(exc)) from None

    def _check_smt(self, default: frozenset[int], n: int, what: str) -> None:
        """``enforceSMTAlignment``: it counts the default set less the reserved cores, not
        the pool the take chooses from, and holds without SMT too (a core of one CPU)."""
        tpc = self.topo.threads_per_core
        if "full-pcpus-only" not in self.config.options:
            return
        if n % tpc:
            raise Refused(f"{what}: {smt_alignment_error(n, tpc)}")
        physical = len(default - self._reserved_cores)
        if n > physical:
            raise Refused(f"{what}: {smt_alignment_error(n, tpc, physical)}")

    def _take(self, pool: Iterable[int], n: int, hint: frozenset[int] | None,
              what: str, *, smt: bool = True, default: Iterable[int] | None = None
              ) -> frozenset[int]:
        """``default``: the free CPUs full-pcpus-only counts (the pool when not given);
        ``smt=False`` where the kubelet does not check (the slices of a pod-level block)."""
        pool = frozenset(pool)
        if smt:
            self._check_smt(pool if default is None else frozenset(default), n, what)
        taker = policy_taker(self.topo, self.config.options, self.config.kubelet_version)
        if hint is not None and "align-by-socket" in self.config.options:
            # The hinted NUMA nodes widen to their whole sockets.
            hint = frozenset().union(*(self._numas_of_socket[s] for s in self._sockets_of(hint)))
        got = take_with_hint(self.topo, pool, n, hint, taker)
        if got is None:
            raise Refused(f"{what}: {not_enough_cpus(n, len(pool))}")
        self.grabbed |= got - pool
        return got

    def give_back(self, cpus: Iterable[int]) -> None:
        """CPUs the kubelet returns to its default set (``RemoveContainer``), whoever else
        holds them: reserved ones too, which under strict-cpu-reservation stay there as
        reserved CPUs in the default set."""
        cpus = frozenset(cpus)
        self.free |= cpus - self.reserved
        if "strict-cpu-reservation" in self.config.options:
            self._default_reserved |= cpus & self.reserved

    @property
    def mem_free(self) -> dict[int, int]:
        """Regular memory free per NUMA node, as the memory manager's state has it."""
        return self.mem.free()

    def _sockets_of(self, mask: frozenset[int]) -> frozenset[int]:
        got = self._mask_sockets.get(mask)
        if got is None:
            got = self._mask_sockets[mask] = frozenset().union(
                *(self._sockets_of_numa[n] for n in mask))
        return got
