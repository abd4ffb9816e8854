"""``plan --fleet``: the pods of a manifest placed on every node of a fleet as each stood
when its exporter last recorded it, and the nodes ranked by fit (docs/plan.md#fleet).

Pure: the caller reads each node's :class:`NodeState` (the history store records it, see
docs/history.md#placement-state). Nodes whose state is the same (topology, kubelet
configuration, free CPUs and memory) are modelled once: a fleet of 1,000 nodes is mostly a
few machine types with a few states each."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

from reconciler.allocator.config import ModelConfig, ModelError
from reconciler.allocator.live import NodeState
from reconciler.allocator.model import NodeModel
from reconciler.allocator.plan import PodPlan, plan_templates
from reconciler.allocator.topology import CPUTopology, TopologyError, from_snapshot
from reconciler.manifests import PodTemplate


@dataclass(frozen=True, slots=True)
class FleetFit:
    """One node's answer: admitted (every pod of the manifest, in order), the NUMA nodes
    the admitted pods' exclusive CPUs span (all of the node's for a pod without exclusive
    CPUs), the CPUs left free for exclusive allocation after them, or the first refusal's
    reason."""

    node: str
    admitted: bool
    reason: str | None
    numa_nodes: tuple[int, ...]
    cpus_left: int
    config_recorded: bool  # False: the node's configuration was unknown, ``fallback`` used
    plans: tuple[PodPlan, ...]
    # Not a candidate: the node has none of a device resource a pod asks for (the scheduler
    # would not place the pod there; the kubelet itself ignores a resource it lacks).
    excluded: bool = False
    stale: bool = False  # its state is older than the caller's staleness bound

    def sort_key(self) -> tuple[int, int, int, str]:
        """Admitted first, fresh before stale; among them fewer NUMA nodes, then more CPUs
        left; then name. Refused nodes next, then nodes without the devices asked."""
        if self.excluded:
            return (3, 0, 0, self.node)
        if not self.admitted:
            return (2, 0, 0, self.node)
        return (int(self.stale), len(self.numa_nodes), -self.cpus_left, self.node)


def lacking_devices(templates: Sequence[PodTemplate], state: NodeState) -> str | None:
    """Why the node cannot take the manifest's pods for their devices: a device resource
    asked for and none of it known on the node; ``None`` when every resource is there."""
    have = state.devices.by_name
    asked: dict[str, int] = {}
    for t in templates:
        for c in (*t.pod.init_containers, *t.pod.containers):
            for name, n in c.resources.extended:
                asked[name] = max(asked.get(name, 0), n)
    missing = sorted(name for name in asked if name not in have)
    if not missing:
        return None
    return ("no " + ", ".join(f"{name} (a pod asks {asked[name]})" for name in missing)
            + " on this node: none in its device records")


def _fit(name: str, state: NodeState, templates: Sequence[PodTemplate],
         fallback: ModelConfig, topologies: dict[int, CPUTopology]) -> FleetFit:
    config = fallback if state.config is None else ModelConfig.from_kubelet_config(state.config)
    try:
        # The model's form of a topology, once per topology object (the reader shares
        # one object among the nodes of a machine type).
        topo = topologies.get(id(state.topology))
        if topo is None:
            topo = topologies[id(state.topology)] = from_snapshot(state.topology)
        model = NodeModel(topo, config, state.devices)
    except (ModelError, TopologyError) as exc:
        return FleetFit(name, False, f"the node cannot be modelled: {exc}", (), 0,
                        state.config is not None, ())
    model.seed(state.free_cpus, dict(state.free_memory), state.memory_groups)
    if state.devices:
        model.dev_free = {name: set(ids) for name, ids in state.free_devices}
    plans = tuple(plan_templates(templates, config, node=model))
    refused = next((p for p in plans if not p.admitted), None)
    # A pod without exclusive CPUs runs on the node's shared CPUs, which span every NUMA
    # node: it counts as using them all, not none.
    every = model.topo.numa_nodes
    numa = sorted({n for p in plans if p.admitted
                   for n in (p.numa_nodes if p.cpus else every) or ()})
    return FleetFit(name, refused is None, None if refused is None else refused.reason,
                    tuple(numa), len(model.free), state.config is not None, plans)


def plan_fleet(templates: Sequence[PodTemplate], nodes: Sequence[tuple[str, NodeState]],
               fallback: ModelConfig, stale: Collection[str] = ()) -> list[FleetFit]:
    """The fit of ``templates`` on each named node, ranked (:meth:`FleetFit.sort_key`;
    the nodes named in ``stale`` after the fresh ones that fit). Each pod is placed on the
    node as recorded, in order, as ``plan --node`` does; a node without a device resource a
    pod asks for is excluded; nodes of equal ``key`` (non-empty) are modelled once."""
    done: dict[str, FleetFit] = {}
    topologies: dict[int, CPUTopology] = {}
    fits = []
    for name, state in nodes:
        fit = done.get(state.key) if state.key else None
        if fit is None:
            lacking = lacking_devices(templates, state)
            fit = _fit(name, state, templates, fallback, topologies) if lacking is None \
                else FleetFit(name, False, lacking, (), 0, state.config is not None, (),
                              excluded=True)
            if state.key:
                done[state.key] = fit
        fits.append(replace(fit, node=name, stale=name in stale))
    return sorted(fits, key=FleetFit.sort_key)
