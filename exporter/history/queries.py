"""Read queries over the history, shared by the dashboard API and the ``history`` CLI.

Every function returns JSON-ready values (times as RFC 3339 strings). Lists are paged by
keyset: ``cursor`` is the last row id of the previous page, opaque to clients."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, and_, func, or_, select

from exporter.history.schema import (
    SUMMARY_ASSIGNMENTS,
    SUMMARY_POOLS,
    anomaly_intervals,
    assignment_intervals,
    history_gaps,
    node_summaries,
    nodes,
)
from exporter.history.store import HistoryStore, at_filter, overlap_filter
from exporter.history.timeutil import format_time

MAX_POINTS = 20000


@dataclass(frozen=True, slots=True)
class Page:
    items: list[dict[str, Any]]
    next_cursor: str | None

    def to_json(self) -> dict[str, Any]:
        return {"items": self.items, "next_cursor": self.next_cursor}


@dataclass(frozen=True, slots=True)
class Window:
    """``at`` (a point in time) or ``start``/``end`` (an overlap window), or nothing."""

    at: datetime | None = None
    start: datetime | None = None
    end: datetime | None = None


def _none_if_empty(text: str) -> str | None:
    return text or None


def _page(rows: list[Any], limit: int, item: Any) -> Page:
    more = len(rows) > limit
    rows = rows[:limit]
    return Page([item(r) for r in rows], str(rows[-1].id) if more and rows else None)


def list_nodes(store: HistoryStore, *, limit: int = 100, cursor: int | None = None) -> Page:
    stmt = select(nodes.c.id, nodes.c.name, nodes.c.first_seen, nodes.c.last_seen,
                  nodes.c.online_cpus).order_by(nodes.c.id).limit(limit + 1)
    if cursor is not None:
        stmt = stmt.where(nodes.c.id > cursor)
    with store.read() as conn:
        rows = list(conn.execute(stmt))
    return _page(rows, limit, lambda r: {
        "name": r.name, "first_seen": format_time(r.first_seen),
        "last_seen": format_time(r.last_seen), "online_cpus": r.online_cpus})


def _assignment_json(r: Any) -> dict[str, Any]:
    return {
        "id": r.id, "node": r.node, "pod_uid": _none_if_empty(r.pod_uid),
        "namespace": r.namespace, "pod": r.pod, "container": r.container,
        "sidecar": bool(r.sidecar), "assignment": r.assignment,
        "memory_assignment": r.memory_assignment, "cpus": r.cpuset, "cpu_count": r.cpu_count,
        "memory_bytes": r.memory_bytes,
        "numa_nodes": [int(n) for n in r.numa_nodes.split(",") if n],
        "valid_from": format_time(r.valid_from), "valid_to": format_time(r.valid_to),
    }


def assignments(store: HistoryStore, *, node: str | None = None,
                namespace: str | None = None, pod: str | None = None,
                container: str | None = None, assignment: str | None = None,
                window: Window = Window(), limit: int = 100,
                cursor: int | None = None) -> Page:
    a = assignment_intervals
    stmt: Select[Any] = (select(a, nodes.c.name.label("node"))
                         .join(nodes, nodes.c.id == a.c.node_id)
                         .order_by(a.c.id).limit(limit + 1))
    for column, value in ((nodes.c.name, node), (a.c.namespace, namespace), (a.c.pod, pod),
                          (a.c.container, container), (a.c.assignment, assignment)):
        if value is not None:
            stmt = stmt.where(column == value)
    if window.at is not None:
        stmt = stmt.where(at_filter(a.c.valid_from, a.c.valid_to, window.at))
    elif window.start is not None or window.end is not None:
        stmt = stmt.where(overlap_filter(a.c.valid_from, a.c.valid_to, window.start,
                                         window.end))
    if cursor is not None:
        stmt = stmt.where(a.c.id > cursor)
    with store.read() as conn:
        rows = list(conn.execute(stmt))
    return _page(rows, limit, _assignment_json)


def assignments_at(store: HistoryStore, at: datetime, node: str | None = None
                   ) -> list[dict[str, Any]]:
    """Every container's assignment at ``at`` (all pages)."""
    out: list[dict[str, Any]] = []
    cursor: int | None = None
    while True:
        page = assignments(store, node=node, window=Window(at=at), limit=5000, cursor=cursor)
        out.extend(page.items)
        if page.next_cursor is None:
            return out
        cursor = int(page.next_cursor)


def _anomaly_json(r: Any) -> dict[str, Any]:
    return {
        "id": r.id, "node": r.node, "kind": r.kind,
        "namespace": _none_if_empty(r.namespace), "pod": _none_if_empty(r.pod),
        "container": _none_if_empty(r.container), "subject": r.subject, "detail": r.detail,
        "first_seen": format_time(r.first_seen), "last_seen": format_time(r.last_seen),
        "resolved_at": format_time(r.resolved_at),
    }


def anomalies(store: HistoryStore, *, node: str | None = None, kind: str | None = None,
              namespace: str | None = None, pod: str | None = None,
              container: str | None = None, state: str = "any", window: Window = Window(),
              limit: int = 100, cursor: int | None = None) -> Page:
    n = anomaly_intervals
    stmt: Select[Any] = (select(n, nodes.c.name.label("node"))
                         .join(nodes, nodes.c.id == n.c.node_id)
                         .order_by(n.c.id).limit(limit + 1))
    for column, value in ((nodes.c.name, node), (n.c.kind, kind), (n.c.namespace, namespace),
                          (n.c.pod, pod), (n.c.container, container)):
        if value is not None:
            stmt = stmt.where(column == value)
    if state == "open":
        stmt = stmt.where(n.c.resolved_at.is_(None))
    elif state == "resolved":
        stmt = stmt.where(n.c.resolved_at.is_not(None))
    if window.at is not None:
        stmt = stmt.where(at_filter(n.c.first_seen, n.c.resolved_at, window.at))
    elif window.start is not None or window.end is not None:
        stmt = stmt.where(overlap_filter(n.c.first_seen, n.c.resolved_at, window.start,
                                         window.end))
    if cursor is not None:
        stmt = stmt.where(n.c.id > cursor)
    with store.read() as conn:
        rows = list(conn.execute(stmt))
    return _page(rows, limit, _anomaly_json)


def gaps(store: HistoryStore, *, node: str | None = None, window: Window = Window(),
         limit: int = 100, cursor: int | None = None) -> Page:
    g = history_gaps
    stmt: Select[Any] = (select(g, nodes.c.name.label("node"))
                         .join(nodes, nodes.c.id == g.c.node_id)
                         .order_by(g.c.id).limit(limit + 1))
    if node is not None:
        stmt = stmt.where(nodes.c.name == node)
    if window.at is not None:
        stmt = stmt.where(g.c.gap_from <= window.at, g.c.gap_to >= window.at)
    else:
        if window.end is not None:
            stmt = stmt.where(g.c.gap_from < window.end)
        if window.start is not None:
            stmt = stmt.where(g.c.gap_to > window.start)
    if cursor is not None:
        stmt = stmt.where(g.c.id > cursor)
    with store.read() as conn:
        rows = list(conn.execute(stmt))
    return _page(rows, limit, lambda r: {
        "id": r.id, "node": r.node, "from": format_time(r.gap_from),
        "to": format_time(r.gap_to), "dropped_writes": r.dropped_writes, "reason": r.reason})


def auto_step(start: datetime, end: datetime, points: int = 500) -> int:
    span = max((end - start).total_seconds(), 1.0)
    return max(60, math.ceil(span / points))


def check_points(start: datetime, end: datetime, step: int) -> None:
    if (end - start).total_seconds() / step > MAX_POINTS:
        raise ValueError(f"too many points: (to - from) / step exceeds {MAX_POINTS}; "
                         "use a larger step")


def _float(value: Any) -> float | None:
    return None if value is None else round(float(value), 3)


def summary(store: HistoryStore, node: str, start: datetime, end: datetime,
            step: int) -> dict[str, Any]:
    """The node's summaries in [start, end], averaged per ``step`` seconds."""
    s = node_summaries
    bucket = (s.c.at_epoch - s.c.at_epoch % step).label("bucket")
    columns = [f"cpus_{p}" for p in SUMMARY_POOLS] + \
        [f"containers_{a}" for a in SUMMARY_ASSIGNMENTS] + \
        ["online_cpus", "pods", "reclaimed_cpus", "reclaimable_cpus", "anomalies"]
    stmt = (select(bucket, func.count().label("samples"),
                   *[func.avg(s.c[c]).label(c) for c in columns])
            .join(nodes, nodes.c.id == s.c.node_id)
            .where(nodes.c.name == node, s.c.at_epoch >= math.floor(start.timestamp()),
                   s.c.at_epoch <= math.floor(end.timestamp()))
            .group_by(bucket).order_by(bucket))
    with store.read() as conn:
        rows = list(conn.execute(stmt))
    points = []
    for r in rows:
        m = r._mapping
        points.append({
            "t": format_time(datetime.fromtimestamp(int(r.bucket), start.tzinfo)),
            "samples": int(r.samples),
            "cpus": {p: _float(m[f"cpus_{p}"]) for p in SUMMARY_POOLS},
            "containers": {a: _float(m[f"containers_{a}"]) for a in SUMMARY_ASSIGNMENTS},
            "online_cpus": _float(m["online_cpus"]), "pods": _float(m["pods"]),
            "reclaimed_cpus": _float(m["reclaimed_cpus"]),
            "reclaimable_cpus": _float(m["reclaimable_cpus"]),
            "anomalies": _float(m["anomalies"]),
        })
    return {"node": node, "from": format_time(start), "to": format_time(end), "step": step,
            "points": points}


def fleet_ratio(store: HistoryStore, start: datetime, end: datetime, step: int,
                node: str | None = None) -> dict[str, Any]:
    """pod_shared to pod_exclusive CPUs summed over the fleet per step (each node's
    samples averaged within the step first, so nodes count equally)."""
    s = node_summaries
    bucket = (s.c.at_epoch - s.c.at_epoch % step).label("bucket")
    stmt = (select(bucket, s.c.node_id, func.avg(s.c.cpus_pod_shared).label("shared"),
                   func.avg(s.c.cpus_pod_exclusive).label("exclusive"))
            .where(s.c.at_epoch >= math.floor(start.timestamp()),
                   s.c.at_epoch <= math.floor(end.timestamp()))
            .group_by(bucket, s.c.node_id).order_by(bucket))
    if node is not None:
        stmt = stmt.join(nodes, nodes.c.id == s.c.node_id).where(nodes.c.name == node)
    sums: dict[int, list[float]] = {}
    with store.read() as conn:
        for r in conn.execute(stmt):
            acc = sums.setdefault(int(r.bucket), [0.0, 0.0, 0.0])
            acc[0] += float(r.shared)
            acc[1] += float(r.exclusive)
            acc[2] += 1
    points = [{
        "t": format_time(datetime.fromtimestamp(b, start.tzinfo)), "nodes": int(acc[2]),
        "pod_shared_cpus": round(acc[0], 3), "pod_exclusive_cpus": round(acc[1], 3),
        "ratio": round(acc[0] / acc[1], 6) if acc[1] else None,
    } for b, acc in sorted(sums.items())]
    return {"from": format_time(start), "to": format_time(end), "step": step,
            "points": points}


def events(store: HistoryStore, start: datetime, end: datetime | None = None,
           node: str | None = None, limit: int = 10000) -> list[dict[str, Any]]:
    """Changes in [start, end): intervals opened and closed, anomalies raised and resolved,
    gaps; oldest first."""
    a, n, g = assignment_intervals, anomaly_intervals, history_gaps
    out: list[tuple[datetime, int, dict[str, Any]]] = []

    def in_range(col: Any) -> Any:
        return and_(col >= start, col < end) if end is not None else col >= start

    def node_where(table: Any) -> Any:
        return nodes.c.name == node if node is not None else True

    with store.read() as conn:
        rows = conn.execute(
            select(a, nodes.c.name.label("node")).join(nodes, nodes.c.id == a.c.node_id)
            .where(node_where(a), or_(in_range(a.c.valid_from), in_range(a.c.valid_to)))
            .order_by(a.c.id).limit(limit * 2))
        for r in rows:
            base = {k: v for k, v in _assignment_json(r).items()
                    if k not in ("valid_from", "valid_to", "id")}
            if r.valid_from >= start and (end is None or r.valid_from < end):
                out.append((r.valid_from, 1, {"time": format_time(r.valid_from),
                                              "event": "assigned", **base}))
            if r.valid_to is not None and r.valid_to >= start and (
                    end is None or r.valid_to < end):
                out.append((r.valid_to, 0, {"time": format_time(r.valid_to),
                                            "event": "released", **base}))
        rows = conn.execute(
            select(n, nodes.c.name.label("node")).join(nodes, nodes.c.id == n.c.node_id)
            .where(node_where(n), or_(in_range(n.c.first_seen), in_range(n.c.resolved_at)))
            .order_by(n.c.id).limit(limit * 2))
        for r in rows:
            base = {k: v for k, v in _anomaly_json(r).items()
                    if k in ("node", "kind", "namespace", "pod", "container", "detail")}
            if r.first_seen >= start and (end is None or r.first_seen < end):
                out.append((r.first_seen, 3, {"time": format_time(r.first_seen),
                                              "event": "anomaly_raised", **base}))
            if r.resolved_at is not None and r.resolved_at >= start and (
                    end is None or r.resolved_at < end):
                out.append((r.resolved_at, 2, {"time": format_time(r.resolved_at),
                                               "event": "anomaly_resolved", **base}))
        rows = conn.execute(
            select(g, nodes.c.name.label("node")).join(nodes, nodes.c.id == g.c.node_id)
            .where(node_where(g), in_range(g.c.gap_from)).order_by(g.c.id).limit(limit))
        for r in rows:
            out.append((r.gap_from, -1, {
                "time": format_time(r.gap_from), "event": "gap", "node": r.node,
                "until": format_time(r.gap_to), "dropped_writes": r.dropped_writes,
                "detail": r.reason}))
    out.sort(key=lambda e: (e[0], e[1]))
    return [e[2] for e in out[:limit]]


def default_window(start: datetime | None, end: datetime | None,
                   now: datetime) -> tuple[datetime, datetime]:
    end = end or now
    start = start or end - timedelta(days=1)
    return start, end
