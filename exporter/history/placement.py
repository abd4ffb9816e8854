"""A node's placement state as the history stores it (table ``node_placement``, one row per
node, replaced only when its content digest changes): the JSON forms of
:class:`reconciler.allocator.fleet.NodeState` and back. No SQLAlchemy here: the embedded
write path (``serve`` on SQLite) builds these rows too (docs/history.md#placement-state)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from exporter.errors import SourceError
from exporter.sources.topology import topology_from_json, topology_to_json
from reconciler.allocator.live import NodeState
from reconciler.cpuset import format_cpuset, parse_cpuset
from reconciler.kube import KubeletConfig, kubelet_config_from_json
from reconciler.snapshot import Topology


def kubelet_config_to_json(cfg: KubeletConfig) -> dict[str, Any]:
    """``cfg`` as the ``kubeletconfig`` object of ``/configz`` (v1beta1 names), which
    :func:`reconciler.kube.kubelet_config_from_json` reads back to an equal value."""
    out: dict[str, Any] = {
        "cpuManagerPolicy": cfg.cpu_manager_policy,
        "cpuManagerPolicyOptions": dict(cfg.cpu_manager_policy_options),
        "memoryManagerPolicy": cfg.memory_manager_policy,
        "topologyManagerPolicy": cfg.topology_manager_policy,
        "topologyManagerScope": cfg.topology_manager_scope,
        "topologyManagerPolicyOptions": dict(cfg.topology_manager_policy_options),
        "featureGates": dict(cfg.feature_gates),
        "kubeReserved": dict(cfg.kube_reserved),
        "systemReserved": dict(cfg.system_reserved),
        "reservedMemory": list(cfg.reserved_memory),
    }
    if cfg.reserved_system_cpus:
        out["reservedSystemCPUs"] = format_cpuset(cfg.reserved_system_cpus)
    return out


@dataclass(frozen=True, slots=True)
class PlacementRow:
    """The stored form: JSON texts and the digest of all of them."""

    digest: str
    topology: str
    kubelet_config: str | None
    free_cpus: str
    free_memory: str

    def values(self) -> dict[str, Any]:
        return {"digest": self.digest, "topology": self.topology,
                "kubelet_config": self.kubelet_config, "free_cpus": self.free_cpus,
                "free_memory": self.free_memory}


def _text(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def placement_row(state: NodeState) -> PlacementRow:
    topology = _text(topology_to_json(state.topology))
    config = None if state.config is None else _text(kubelet_config_to_json(state.config))
    free_cpus = format_cpuset(state.free_cpus)
    # A node in a memory group carries the group as a third element, so a state without
    # groups keeps the text (and digest) it had before groups were recorded.
    cells = {n: list(g) for g in state.memory_groups for n in g}
    memory = _text([[n, b, cells[n]] if n in cells else [n, b] for n, b in state.free_memory])
    h = hashlib.blake2b(digest_size=16)
    for part in (topology, config or "", free_cpus, memory):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part.encode())
    return PlacementRow(h.hexdigest(), topology, config, free_cpus, memory)


def state_from_row(digest: str, topology: str, kubelet_config: str | None, free_cpus: str,
                   free_memory: str, *, topologies: dict[str, Topology] | None = None
                   ) -> NodeState:
    """The state a row holds (raises ``ValueError`` for a row that is not one).
    ``topologies`` keeps the topologies parsed, by text: a fleet has a few machine types,
    and rows of one type share one object (the model's own form is cached by it too)."""
    topo = None if topologies is None else topologies.get(topology)
    if topo is None:
        try:
            topo = topology_from_json(json.loads(topology), "node_placement.topology")
        except SourceError as exc:
            raise ValueError(str(exc)) from None
        if topologies is not None:
            topologies[topology] = topo
    config = None if kubelet_config is None else kubelet_config_from_json(
        json.loads(kubelet_config))
    memory, groups = _memory_from_text(free_memory)
    return NodeState(topo, config, parse_cpuset(free_cpus), memory, key=digest,
                     memory_groups=groups)


def _memory_from_text(text: str) -> tuple[tuple[tuple[int, int], ...],
                                           tuple[tuple[int, ...], ...]]:
    """The free memory per NUMA node and the memory groups of a ``free_memory`` text."""
    try:
        rows = json.loads(text)
        memory = tuple((int(row[0]), int(row[1])) for row in rows)
        groups = {tuple(int(n) for n in row[2]) for row in rows if len(row) > 2}
    except (TypeError, IndexError, KeyError) as exc:
        raise ValueError(f"free_memory is not a list of [node, bytes(, group)]: {exc}") from None
    return memory, tuple(sorted(groups))
