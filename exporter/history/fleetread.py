"""The fleet's latest placement states, read for ``plan --fleet`` and its API route
(docs/plan.md#fleet): one query of ``nodes`` joined with ``node_placement``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import inspect, select

from exporter.errors import UserError
from exporter.history.placement import state_from_row
from exporter.history.schema import node_placement, nodes
from exporter.history.store import HistoryStore
from reconciler.allocator.config import ModelConfig
from reconciler.allocator.fleet import FleetFit, plan_fleet
from reconciler.allocator.live import NodeState
from reconciler.allocator.plan import PodPlan
from reconciler.cpuset import format_cpuset
from reconciler.manifests import PodTemplate
from reconciler.snapshot import Topology


@dataclass(frozen=True, slots=True)
class RecordedNode:
    """A node of the history: its placement state as last recorded, or why there is none."""

    name: str
    last_seen: datetime
    recorded_at: datetime | None
    state: NodeState | None
    missing: str | None  # why ``state`` is None


NO_STATE = ("no placement state recorded (its CPU topology was unknown, or its exporter "
            "predates it)")


def read_fleet(store: HistoryStore) -> list[RecordedNode]:
    """Every node of the history, by name, with its latest placement state."""
    n, p = nodes, node_placement
    with store.read() as conn:
        if not inspect(conn).has_table("node_placement"):
            raise UserError(f"{store.url}: the history predates placement state (schema "
                            f"{store.revision() or 'unknown'}); an exporter of this version "
                            "upgrades it and records its node with its next ledger")
        rows = conn.execute(
            select(n.c.name, n.c.last_seen, p.c.recorded_at, p.c.digest, p.c.topology,
                   p.c.kubelet_config, p.c.free_cpus, p.c.free_memory)
            .select_from(n.outerjoin(p, p.c.node_id == n.c.id)).order_by(n.c.name)).all()
    out = []
    parsed: dict[str, NodeState | str] = {}  # by digest: most nodes share a few states
    topologies: dict[str, Topology] = {}
    for name, last_seen, recorded_at, digest, topology, config, free_cpus, memory in rows:
        if digest is None:
            out.append(RecordedNode(name, last_seen, None, None, NO_STATE))
            continue
        state = parsed.get(digest)
        if state is None:
            try:
                state = state_from_row(digest, topology, config, free_cpus, memory,
                                       topologies=topologies)
            except ValueError as exc:  # a row edited by hand, or of a newer writer
                state = f"unreadable placement state: {exc}"
            parsed[digest] = state
        if isinstance(state, str):
            out.append(RecordedNode(name, last_seen, recorded_at, None, state))
        else:
            out.append(RecordedNode(name, last_seen, recorded_at, state, None))
    return out


ORDER = ("admitted first; among admitted, fewer NUMA nodes used by the pods' exclusive CPUs, "
         "then more CPUs left for exclusive allocation, then name; then refused nodes, then "
         "nodes without placement state, by name")


@dataclass(frozen=True, slots=True)
class FleetAnswer:
    fits: list[FleetFit]
    recorded: dict[str, RecordedNode]
    unknown: list[RecordedNode]  # nodes without a usable state, by name


def plan_on_fleet(store: HistoryStore, templates: Sequence[PodTemplate],
                  fallback: ModelConfig) -> FleetAnswer:
    """Read the fleet and place ``templates`` on every node (ranked: :data:`ORDER`)."""
    recorded = read_fleet(store)
    known = [(r.name, r.state) for r in recorded if r.state is not None]
    fits = plan_fleet(templates, known, fallback)
    return FleetAnswer(fits, {r.name: r for r in recorded},
                       [r for r in recorded if r.state is None])


def _time(t: datetime | None) -> str | None:
    return None if t is None else t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _pod_json(p: PodPlan) -> dict[str, Any]:
    t = p.template
    return {"kind": t.kind, "namespace": t.namespace, "name": t.name, "admitted": p.admitted,
            "reason": p.reason, "cpus": format_cpuset(p.cpus) if p.cpus else None,
            "numa_nodes": list(p.numa_nodes or ())}


def answer_json(answer: FleetAnswer) -> dict[str, Any]:
    """The JSON answer of ``plan --fleet -o json`` and of ``POST /api/v1/fleet/plan``."""
    items: list[dict[str, Any]] = []
    for f in answer.fits:
        r = answer.recorded[f.node]
        items.append({
            "rank": len(items) + 1, "node": f.node, "admitted": f.admitted, "reason": f.reason,
            "numa_nodes": list(f.numa_nodes), "cpus_left": f.cpus_left,
            "config": "recorded" if f.config_recorded else "assumed",
            "recorded_at": _time(r.recorded_at), "last_seen": _time(r.last_seen),
            "pods": [_pod_json(p) for p in f.plans]})
    for r in answer.unknown:
        items.append({
            "rank": len(items) + 1, "node": r.name, "admitted": None, "reason": r.missing,
            "numa_nodes": [], "cpus_left": None, "config": None,
            "recorded_at": _time(r.recorded_at), "last_seen": _time(r.last_seen), "pods": []})
    return {"order": ORDER, "nodes": items}
