"""The kubelet's static CPU policy, topology manager and Static memory manager, as a model
(docs/design.md#allocator).

Three paths:

* legacy per-container allocation: every eligible container gets exclusive CPUs from the
  node pool (pods without pod-level resources);
* pod scope, under a topology policy other than none, for a pod with pod-level resources:
  one NUMA-aligned block of the budget's size, sidecar slices, init-container reuse, app
  slices, and the pod shared pool;
* container scope or the none policy, for such a pod: eligible containers get exclusive CPUs
  from the node pool, not held to the budget, the rest run on the node shared pool.

A pod with pod-level resources on a kubelet without PodLevelResourceManagers gets nothing.

The node is built in layers, one module each: its state and take (``node_core``), its
hints (``node_hints``), its placement paths (``node_paths``), and here admission, release,
resize and starting from a checkpoint.

``NodeModel.admit`` either places a pod and records its :class:`PodPlacement` (the ground
truth: every container's assignment and cpuset) or returns a :class:`Rejection` with the
kubelet's reason, leaving the state untouched. Every refusal is raised as one
:class:`Refused` (rules.py) and turned into a :class:`Rejection` in one place; a refusal
after a pod block was taken keeps it out of the default set, as the kubelet does.
``release`` returns every CPU and byte. ``NodeModel.from_checkpoint`` starts from the
kubelet's own state (the per-container exclusive sets and the default set), whose
containers ``remove_container`` removes one at a time. A kubelet restart is restart.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from reconciler.allocator.config import RESIZE_INFEASIBLE, ModelConfig, ModelError
from reconciler.allocator.devices import DeviceWork
from reconciler.allocator.memory_state import MachineState
from reconciler.allocator.node_paths import NodePaths
from reconciler.allocator.placement import ContainerTruth, PodPlacement, Rejection
from reconciler.allocator.resize import take_distributed_for_resize
from reconciler.allocator.rules import (
    Leaked,
    Refused,
    Work,
    not_enough_cpus,
    pod_guaranteed_cpus,
    smt_alignment_error,
)
from reconciler.allocator.take import take_for_resize
from reconciler.allocator.topology import CPUTopology
from reconciler.cpuset import format_cpuset
from reconciler.kube import PodSpec
from reconciler.pools import CPU_POOLS as POOLS
from reconciler.pools import Assignment

__all__ = [
    "POOLS", "Assignment", "ContainerTruth", "ModelConfig", "ModelError", "NodeModel",
    "PodPlacement", "Rejection", "not_enough_cpus", "pod_guaranteed_cpus",
    "smt_alignment_error",
]


class NodeModel(NodePaths):
    """One node's allocation state, and the kubelet's admission, release and resize on it."""

    def seed(self, free: Iterable[int], mem_free: Mapping[int, int],
             groups: Iterable[tuple[int, ...]] = ()) -> None:
        """Start from a node already in use: only ``free`` (less the reserved CPUs) may be
        handed out, ``mem_free`` bytes are left per NUMA node, and the NUMA nodes of each of
        ``groups`` hold blocks together (one node: blocks of its own). Pods placed before
        the seed are not known to the model, so nothing of theirs can be released."""
        self.free = (set(free) & set(self.topo.online)) - self.reserved \
            if self.config.static else set()
        for n, st in self.mem.nodes.items():
            table = st.tables["memory"]
            table.free = max(0, min(table.allocatable, mem_free.get(n, 0)))
            table.reserved = table.allocatable - table.free
        for n, st in self.mem.nodes.items():
            st.cells, st.assignments = (n,), 0
        for cells in groups:
            for n in cells:
                held = self.mem.nodes.get(n)
                if held is not None:
                    held.cells, held.assignments = tuple(cells), 1

    def held_groups(self) -> tuple[tuple[int, ...], ...]:
        """The NUMA groups that hold memory blocks now (what :meth:`seed` takes)."""
        return tuple(sorted({st.cells for st in self.mem.nodes.values() if st.assignments}))

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
        if "strict-cpu-reservation" in model.config.options:
            model._default_reserved = shared & model.reserved
        model._unaccounted = topo.online - seen
        return model

    def remove_container(self, pod_uid: str, container: str) -> frozenset[int]:
        """The static policy's ``RemoveContainer`` for a checkpointed container: its CPUs
        return to the default set. Returns them (empty for a container the state lacks)."""
        freed = self.checkpointed.pop((pod_uid, container), frozenset())
        self.free |= freed - self.reserved
        return freed

    def admit(self, pod: PodSpec) -> PodPlacement | Rejection:
        """Place ``pod`` as the kubelet would, or say why it would reject it."""
        placed = self.pods.get((pod.namespace, pod.name))
        if placed is not None:
            # Admitting the same pod again changes nothing, as the kubelet skips containers
            # already in its state; another pod under the name is refused.
            if placed.spec == pod:
                return placed
            return Rejection(pod.namespace, pod.name, "a pod with this name is already placed")
        self.grabbed = set()
        result = self.plan(pod)
        if isinstance(result, Rejection):
            # The sweep after a refusal gives back what its containers were given: the CPUs
            # taken from the pool were never out of it here, those claimed while in use
            # join the default set (docs/design.md#allocator).
            self.give_back(self.grabbed)
            self.device_picks.pop(pod.uid, None)
            if result.memory_after is not None:
                self.mem = result.memory_after
            if result.leaked:
                self.free -= result.leaked
                self.orphan_blocks[pod.uid] = result.leaked
            if result.devices_checkpointed:
                # Dropped from the device manager's memory by its next sweep, not from the
                # file: a restart before the next write holds them back (restart.py).
                self._write_device_checkpoint({result.key: result.devices_checkpointed})
            return result
        placement, work = result
        for (uid, name), cpus in list(self.checkpointed.items()):
            if uid == pod.uid and cpus <= placement.held:
                del self.checkpointed[(uid, name)]  # kept by the container (_legacy)
        self.free = work.free
        self.mem = work.mem
        self.pods[placement.key] = placement
        if work.dev is not None:
            self.dev_free = work.dev.free
            self._dev_held[placement.key] = work.dev.containers
            if work.dev.misses:
                self.device_misses[placement.key] = work.dev.misses
            if any(work.dev.containers.values()):
                self._write_device_checkpoint()
        self.device_picks.pop(pod.uid, None)
        for c in placement.containers:
            if c.assignment == "node_exclusive":
                self._admitted[(*placement.key, c.name)] = c.exclusive
        return placement

    def _write_device_checkpoint(
            self, refused: dict[tuple[str, str], dict[str, frozenset[str]]] | None = None
    ) -> None:
        """The device manager's checkpoint as it writes it: every pod's devices, and
        ``refused``, a pod refused after some of its containers were given devices."""
        out: dict[tuple[str, str], dict[str, frozenset[str]]] = dict(refused or {})
        for key, by_container in self._dev_held.items():
            pod: dict[str, frozenset[str]] = {}
            for by_resource in by_container.values():
                for name, ids in by_resource.items():
                    pod[name] = pod.get(name, frozenset()) | ids
            out[key] = pod
        self._dev_ckpt = out

    def plan(self, pod: PodSpec) -> tuple[PodPlacement, Work] | Rejection:
        """Work out a placement without changing the state."""
        work = Work(free=set(self.free), mem=self.mem.copy())
        if self.devices:
            work.dev = DeviceWork(self.devices, self.dev_free, self.topo.numa_nodes,
                                  self.config.kubelet_version, self.device_picks.get(pod.uid))
        try:
            placement = self._place(pod, work)
            # A pod whose memory is pinned took its devices on that path's hint.
            if work.dev is not None and placement.path == "none" and not work.dev.walked:
                placement = self._shared_devices(pod, work, placement)
            return self.add_containers(placement, work.mem), work
        except Leaked as exc:
            return Rejection(pod.namespace, pod.name, str(exc), exc.block,
                             self._swept(work), self._checkpointed(work))
        except Refused as exc:
            return Rejection(pod.namespace, pod.name, str(exc), memory_after=self._swept(work),
                             devices_checkpointed=self._checkpointed(work))

    @staticmethod
    def _checkpointed(work: Work) -> dict[str, frozenset[str]]:
        return dict(work.dev.checkpointed) if work.dev is not None else {}

    @staticmethod
    def _swept(work: Work) -> MachineState | None:
        """The machine state after the sweep that follows a refusal: the blocks given to
        the pod's containers go back, but a node keeps the group a block set while it
        holds another block."""
        if not work.mem_entries or work.pod_memory:
            return None
        for blocks in work.mem_entries.values():
            work.mem.release(blocks)
        return work.mem

    def release(self, namespace: str, name: str) -> PodPlacement | None:
        """Remove a pod: its whole block (or its exclusive sets) and memory go back."""
        placement = self.pods.pop((namespace, name), None)
        if placement is None:
            return None
        for c in placement.containers:
            self._admitted.pop((namespace, name, c.name), None)
        # A pod block goes back whole, and only the block (RemoveContainer's pod-level arm).
        self.give_back(placement.block or placement.held)
        entries = dict(placement.mem_entries)
        self.release_memory(entries, placement.block_memory,
                            [c.name for c in (*placement.spec.init_containers,
                                              *placement.spec.containers)])
        self.device_misses.pop((namespace, name), None)
        for held in self._dev_held.pop((namespace, name), {}).values():
            for resource, ids in held.items():
                self.dev_free.setdefault(resource, set()).update(ids)
        return placement

    def resize(self, namespace: str, name: str, container: str, cpus: int
               ) -> PodPlacement | Rejection:
        """An in-place resize of a node-exclusive container to ``cpus`` exclusive CPUs. The
        released kubelets refuse it (``exclusive_cpu_resize`` "off") or, with the alpha gate,
        leave the CPUs as they are ("keep"); only "proposal" grows from the free CPUs
        keeping what it holds, or shrinks within its own keeping those it was admitted
        with, as the upstream work proposes."""
        placement = self.pods.get((namespace, name))
        truth = next((c for c in placement.containers if c.name == container), None) \
            if placement else None
        if placement is None or truth is None:
            return Rejection(namespace, name, f"no placed container {container}")
        mode = self.config.exclusive_cpu_resize
        if self.config.static and placement.spec.guaranteed and mode != "proposal":
            # No released static policy resizes exclusive CPUs (docs/design.md#allocator).
            if mode == "off":
                return Rejection(namespace, name, RESIZE_INFEASIBLE)
            return placement
        try:
            grown = self._resized(placement, truth, cpus)
        except Refused as exc:
            return Rejection(namespace, name, str(exc))
        self.free -= grown - truth.exclusive
        self.free |= truth.exclusive - grown
        resized = replace(truth, exclusive=grown, cpus=grown)
        self.pods[placement.key] = replace(placement, containers=tuple(
            resized if c.name == container else c for c in placement.containers))
        return self.pods[placement.key]

    def _resized(self, placement: PodPlacement, truth: ContainerTruth, cpus: int
                 ) -> frozenset[int]:
        if truth.assignment != "node_exclusive":
            raise Refused(f"container {truth.name} holds no node-exclusive CPUs to resize")
        current = truth.exclusive
        baseline = self._admitted.get((*placement.key, truth.name), current)
        if cpus < len(baseline):
            raise Refused(f"requested number of CPUs ( {cpus} ) are less than number of "
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
            raise Refused(f"container {truth.name}: "
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
