"""The fleet's latest placement states, read for ``plan --fleet`` and its API route
(docs/plan.md#fleet): one query of ``nodes`` joined with ``node_placement``."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import inspect, select

from exporter.errors import UserError
from exporter.history.fleetplan import DEFAULT_STALE_AFTER
from exporter.history.placement import state_from_row
from exporter.history.schema import device_intervals, node_placement, nodes
from exporter.history.store import HistoryStore
from reconciler.allocator.config import ModelConfig
from reconciler.allocator.devices import Device, DeviceError, NodeDevices
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
        devices = read_devices(conn) if inspect(conn).has_table("device_intervals") else {}
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
            out.append(RecordedNode(name, last_seen, recorded_at,
                                    _with_devices(state, devices.get(name)), None))
    return out


@dataclass(slots=True)
class _Seen:
    """One node's device records: each device's NUMA nodes (narrowed by every row that
    names it) and the devices held now (rows still open)."""

    numa: dict[str, dict[str, frozenset[int]]]
    held: dict[str, set[str]]


def _split(text: str) -> list[str]:
    return [part for part in text.split(",") if part]


def read_devices(conn: Any) -> dict[str, _Seen]:
    """Every node's device-plugin devices as the history knows them
    (docs/plan.md#devices-on-the-fleet): those its containers held within the retention.
    A row joins the NUMA nodes of all its devices, so a device's NUMA nodes are those of
    every row that names it, intersected (exact for a row of one device)."""
    d = device_intervals
    rows = conn.execute(
        select(nodes.c.name, d.c.resource, d.c.device_ids, d.c.numa_nodes,
               d.c.valid_to.is_(None))
        .select_from(d.join(nodes, nodes.c.id == d.c.node_id)).order_by(d.c.id)).all()
    out: dict[str, _Seen] = {}
    for name, resource, ids, numa_text, is_open in rows:
        seen = out.setdefault(name, _Seen({}, {}))
        try:
            numa = frozenset(int(n) for n in _split(numa_text))
        except ValueError:  # a row edited by hand: its devices count, without topology
            numa = frozenset()
        known = seen.numa.setdefault(resource, {})
        for dev in _split(ids):
            old = known.get(dev)
            # No NUMA nodes in a row says nothing; rows that disagree: the later one wins.
            known[dev] = numa if old is None else old if not numa else (old & numa) or numa
            if is_open:
                seen.held.setdefault(resource, set()).add(dev)
    return out


def _with_devices(state: NodeState, seen: _Seen | None) -> NodeState:
    """``state`` with the node's known devices, its key extended by them (two nodes of one
    placement state but other devices place pods differently)."""
    if seen is None:
        return state
    try:
        devices = NodeDevices.of({r: [Device(i, tuple(sorted(n))) for i, n in devs.items()]
                                  for r, devs in seen.numa.items()})
    except DeviceError:
        return state
    free = tuple((r, frozenset(devs) - seen.held.get(r, set()))
                 for r, devs in sorted(seen.numa.items()))
    h = hashlib.blake2b(digest_size=8)
    h.update(repr((devices.resources, free)).encode())
    return replace(state, devices=devices, free_devices=free,
                   key=f"{state.key}:{h.hexdigest()}" if state.key else "")


ORDER = ("admitted first, nodes seen within the staleness bound before stale ones; among "
         "them, fewer NUMA nodes used by the pods' exclusive CPUs, then more CPUs left for "
         "exclusive allocation, then name; then refused nodes; then nodes without a device "
         "resource the pods ask for; then nodes without placement state; each by name")


@dataclass(frozen=True, slots=True)
class FleetAnswer:
    fits: list[FleetFit]
    recorded: dict[str, RecordedNode]
    unknown: list[RecordedNode]  # nodes without a usable state, by name
    now: datetime
    stale_after: float  # seconds since last_seen after which a node is stale


def plan_on_fleet(store: HistoryStore, templates: Sequence[PodTemplate],
                  fallback: ModelConfig, *, stale_after: float = DEFAULT_STALE_AFTER,
                  now: datetime | None = None) -> FleetAnswer:
    """Read the fleet and place ``templates`` on every node (ranked: :data:`ORDER`); a
    node whose exporter last wrote more than ``stale_after`` seconds before ``now`` is
    stale."""
    now = now or datetime.now(UTC)
    recorded = read_fleet(store)
    known = [(r.name, r.state) for r in recorded if r.state is not None]
    stale = {r.name for r in recorded if _age(r, now) > stale_after}
    fits = plan_fleet(templates, known, fallback, stale)
    return FleetAnswer(fits, {r.name: r for r in recorded},
                       [r for r in recorded if r.state is None], now, stale_after)


def _age(r: RecordedNode, now: datetime) -> float:
    """Seconds since the node's exporter last wrote (the store's times are UTC)."""
    seen = r.last_seen if r.last_seen.tzinfo else r.last_seen.replace(tzinfo=UTC)
    return max(0.0, (now - seen).total_seconds())


def _time(t: datetime | None) -> str | None:
    return None if t is None else t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _pod_json(p: PodPlan) -> dict[str, Any]:
    t = p.template
    return {"kind": t.kind, "namespace": t.namespace, "name": t.name, "admitted": p.admitted,
            "reason": p.reason, "cause": p.cause_words,
            "cpus": format_cpuset(p.cpus) if p.cpus else None,
            "numa_nodes": list(p.numa_nodes or ()),
            "memory_numa_nodes": list(p.memory_numa or ()),
            "devices": [{"container": c.name, "resource_name": d.resource_name,
                         "device_ids": list(d.device_ids), "numa_nodes": list(d.numa_nodes)}
                        for c in p.containers for d in c.devices]}


def _seen(answer: FleetAnswer, r: RecordedNode) -> dict[str, Any]:
    age = _age(r, answer.now)
    return {"recorded_at": _time(r.recorded_at), "last_seen": _time(r.last_seen),
            "age_seconds": round(age), "stale": age > answer.stale_after}


def _known_devices(state: NodeState | None) -> list[dict[str, Any]]:
    if state is None:
        return []
    free = dict(state.free_devices)
    return [{"resource_name": name, "known": len(devs),
             "free": len(free.get(name, ()))} for name, devs in state.devices.resources]


def answer_json(answer: FleetAnswer) -> dict[str, Any]:
    """The JSON answer of ``plan --fleet -o json`` and of ``POST /api/v1/fleet/plan``."""
    items: list[dict[str, Any]] = []
    for f in answer.fits:
        r = answer.recorded[f.node]
        refused = next((p for p in f.plans if not p.admitted), None)
        items.append({
            "rank": len(items) + 1, "node": f.node, "admitted": f.admitted, "reason": f.reason,
            "cause": refused.cause_words if refused is not None else None,
            "excluded": f.excluded, "numa_nodes": list(f.numa_nodes),
            "cpus_left": None if f.excluded else f.cpus_left,
            "config": "recorded" if f.config_recorded else "assumed",
            **_seen(answer, r), "devices": _known_devices(r.state),
            "pods": [_pod_json(p) for p in f.plans]})
    for r in answer.unknown:
        items.append({
            "rank": len(items) + 1, "node": r.name, "admitted": None, "reason": r.missing,
            "cause": None, "excluded": False, "numa_nodes": [], "cpus_left": None,
            "config": None, **_seen(answer, r), "devices": [], "pods": []})
    return {"order": ORDER, "stale_after_seconds": answer.stale_after, "nodes": items}
